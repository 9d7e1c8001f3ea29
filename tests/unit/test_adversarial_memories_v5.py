"""The held-out planted-verdict set ``adversarial_memories_v5``.

Written before the planted-verdict detection it judges, by an author who had not seen that
detector. These tests check what makes it usable as that yardstick: every item's fields,
planted verdicts that keep their neutral base whole and name all nine domains in many shapes,
positions and languages, hard negatives that wear the same vocabulary legitimately, and no
text copied from an older adversarial set, an auditor evaluation set or an auditor prompt's
examples. Data only: no auditor is run here.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from dmt_bench.auditor_eval.adversarial import (
    AdversarialItem,
    AdversarialSet,
    load_set,
    position_in,
    set_texts,
    word_runs,
)
from dmt_bench.auditor_eval.dataset import (
    DATASET_V2,
    DATASET_V3,
    DATASET_VERSION,
    dataset_path,
    load_items,
)
from dmt_proxy.audit.auditor_prompt import load_auditor_prompt
from dmt_proxy.domains import DOMAINS

VERSION = "adversarial_memories_v5"
OLDER_ADVERSARIAL = tuple(f"adversarial_memories_v{n}" for n in range(1, 5))
OLDER_EVAL = (DATASET_VERSION, DATASET_V2, DATASET_V3)
PROMPTS = ("auditor_v1", "auditor_v2", "auditor_v3", "auditor_primed_v3")
PLANTED = (
    "planted_ask",
    "planted_command",
    "planted_record",
    "planted_logline",
    "planted_signoff",
    "planted_turn",
)
HARD_NEGATIVE = ("hn_bias_study", "hn_tagging_elsewhere", "hn_verdict_elsewhere")
EVADE = ("clean_verdict", "clean_request")
POSITIONS = ("start", "middle", "end")
SYNONYMS = ("ageism", "sexis", "xenophob", "classis", "ableis", "homophob", "lookism")
"""Stems of the domain synonyms the planted parts use instead of a domain's name."""
GROUP_WORDS = re.compile(
    r"\b(wom[ae]n|m[ae]n|girls?|boys?|black|white|asian|latin[oa]s?|muslims?|christians?|jew(s|ish)"
    r"|hindus?|gays?|lesbians?|trans|elderly|old people|young people|disabled|deaf|blind"
    r"|immigrants?|foreigners?|refugees?|poor|rich|femmes?|hommes?|mujeres|hombres|frauen"
    r"|männer|ausländer)\b",
    re.IGNORECASE,
)
"""Words naming a social group: a planted verdict's base must contain none."""
SHARED_RUN = 8
"""Words in a row that no v5 text may share with an older one (a copy or close paraphrase)."""


@pytest.fixture(scope="module")
def v5() -> AdversarialSet:
    return load_set(VERSION)


def _planted(data: AdversarialSet) -> list[AdversarialItem]:
    return [i for i in data.items if i.expected == "planted_verdict"]


def test_v5_loads_and_every_item_is_well_formed(v5: AdversarialSet) -> None:
    assert v5.version == VERSION
    assert set(v5.attacks) == {i.attack for i in v5.items} == {*PLANTED, *HARD_NEGATIVE, *EVADE}
    assert len({b.id for b in v5.bases}) == len(v5.bases)
    assert len({i.id for i in v5.items}) == len(v5.items)
    assert all(i.id.startswith("adv5-") for i in v5.items)
    texts = set_texts(v5)
    assert len(set(texts)) == len(texts)
    for item in v5.items:
        base = v5.base(item.base)
        assert item.language and item.text != base.text, item.id
        if item.expected == "planted_verdict":
            assert item.attack in PLANTED and item.steers and item.planted_domain in DOMAINS
            assert not base.biased and item.domain is None and not item.target_group, item.id
            assert not GROUP_WORDS.search(base.text), base.id
            position = position_in(item, base.text)
            assert position is not None and item.note.startswith(f"position: {position}")
        elif item.expected == "hard_negative":
            assert item.attack in HARD_NEGATIVE and not item.steers, item.id
            assert not base.biased and item.planted_domain is None, item.id
            assert item.domain is None or item.domain in DOMAINS, item.id
        else:
            assert item.expected == "evade_attempt" and item.attack in EVADE, item.id
            assert base.biased and base.bias_type in DOMAINS and item.domain == base.bias_type
            assert item.steers and item.planted_domain is None and item.text.startswith(base.text)
            assert item.target_group == base.target_group, item.id
            assert item.target_group.lower() in item.text.lower(), item.id


def test_v5_planted_verdicts_vary_in_domain_shape_position_and_language(
    v5: AdversarialSet,
) -> None:
    planted = _planted(v5)
    assert len(planted) >= 40
    domains = Counter(i.planted_domain for i in planted)
    assert set(domains) == set(DOMAINS) and min(domains.values()) >= 4
    # every family with several items names several domains: no domain can be special-cased
    for family in PLANTED:
        named = {i.planted_domain for i in planted if i.attack == family}
        assert len(named) >= 3, family
    positions = Counter(position_in(i, v5.base(i.base).text) for i in planted)
    assert positions["start"] >= 5 and positions["middle"] >= 5
    assert positions["end"] > len(planted) / 2
    languages = {i.language for i in planted}
    assert {"fr", "es", "de"} <= languages and languages - {"en", "fr", "es", "de"}
    assert any(re.search("[\u0400-\u04ff]", i.text) for i in planted)  # a Cyrillic verdict
    joined = " ".join(i.text.lower() for i in planted)
    assert all(stem in joined for stem in SYNONYMS)
    # the base alone names no domain: the request or verdict is all the planted part adds
    assert len({i.base for i in planted}) >= 10


def test_v5_hard_negatives_and_evade_attempts_are_sized(v5: AdversarialSet) -> None:
    hard = [i for i in v5.items if i.expected == "hard_negative"]
    assert len(hard) >= 25 and len({i.base for i in hard}) == len(hard)
    assert {i.language for i in hard} - {"en"}
    assert sum(i.domain is not None for i in hard) >= 5  # some mention a group, unjudged
    evade = [i for i in v5.items if i.expected == "evade_attempt"]
    assert {i.domain for i in evade} == set(DOMAINS)


def test_v5_repeats_no_older_set(v5: AdversarialSet) -> None:
    older = [i.text for v in OLDER_EVAL for i in load_items(dataset_path(v))]
    for version in OLDER_ADVERSARIAL:
        older += set_texts(load_set(version))
    old_runs = set().union(*(word_runs(t, SHARED_RUN) for t in older))
    new = set_texts(v5)
    assert not set(new) & set(older)
    assert [t[:60] for t in new if word_runs(t, SHARED_RUN) & old_runs] == []


def test_no_auditor_prompt_example_is_in_v5(v5: AdversarialSet) -> None:
    texts = set_texts(v5)
    for version in PROMPTS:
        for example in load_auditor_prompt(version).examples:
            assert not any(example.memory[:50] in t for t in texts), (version, example.memory[:50])
