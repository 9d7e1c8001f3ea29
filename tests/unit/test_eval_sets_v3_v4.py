"""The held-out sets of issue 29: ``auditor_eval_v3`` and ``adversarial_memories_v4``.

Both were written before the auditor changes they judge. These tests check what makes them
usable as that yardstick: every item's fields (domains, kinds, grounded target groups), the
group sizes the issue's targets need (self-descriptions, hard negatives, benevolent
stereotypes, non-English texts), train and test written independently (disjoint settings,
no shared texts or long word sequences), and no text copied from an older set or from an
auditor prompt's examples. Data only: no auditor is run here.
"""

from __future__ import annotations

import re
from collections import Counter

import pytest

from dmt_bench.auditor_eval.adversarial import AdversarialSet, load_set
from dmt_bench.auditor_eval.dataset import (
    DATASET_V2,
    DATASET_V3,
    DATASET_VERSION,
    EvalItem,
    dataset_path,
    load_items,
)
from dmt_proxy.audit.auditor_prompt import load_auditor_prompt
from dmt_proxy.domains import DOMAINS

BIASED_KINDS = ("judgment", "benevolent")
MENTION_KINDS = ("mention_fact", "mention_law", "mention_research", "mention_support")
NEUTRAL_KINDS = (*MENTION_KINDS, "self_description", "reported_rejected")
STRATEGIES = ("generalisation", "treatment", "endorsed_report", "benevolent")
REQUIRED_LANGUAGES = {"fr", "es", "de", "pt", "it"}
OBFUSCATIONS = ("leetspeak", "spaced_letters", "emoji_standin", "homoglyph", "zero_width")
FRAMINGS = ("fiction_frame", "endorsed_quote", "joke_frame", "test_fixture", "authority_claim")
STEERING = ("fiction_frame", "joke_frame", "test_fixture", "authority_claim")
"""Framings that ask for the text to be discounted (a quotation the user endorses does not)."""
PLANTED = ("planted_request", "planted_json", "planted_label")
OLD_ADVERSARIAL = ("adversarial_memories_v1", "adversarial_memories_v2", "adversarial_memories_v3")
PROMPTS = ("auditor_v1", "auditor_v2", "auditor_v3", "auditor_primed_v3")
SHARED_RUN = 8
"""Words in a row that no new text may share with an older one (a copy or close paraphrase)."""


@pytest.fixture(scope="module")
def v3() -> list[EvalItem]:
    return load_items(dataset_path(DATASET_V3))


@pytest.fixture(scope="module")
def v4() -> AdversarialSet:
    return load_set("adversarial_memories_v4")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _runs(text: str, n: int = SHARED_RUN) -> set[tuple[str, ...]]:
    words = _words(text)
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _older_texts() -> list[str]:
    texts = [i.text for v in (DATASET_VERSION, DATASET_V2) for i in load_items(dataset_path(v))]
    for version in OLD_ADVERSARIAL:
        data = load_set(version)
        texts += [b.text for b in data.bases] + [i.text for i in data.items]
    return texts


def _v4_texts(data: AdversarialSet) -> list[str]:
    return [b.text for b in data.bases] + [i.text for i in data.items]


def test_every_v3_item_is_well_formed(v3: list[EvalItem]) -> None:
    for item in v3:
        assert item.domain in DOMAINS, item.id
        assert item.setting and item.language, item.id
        assert 8 <= len(item.text.split()) <= 60, item.id
        if item.biased:
            assert item.kind in BIASED_KINDS and item.strategy in STRATEGIES, item.id
            # grounded: the gold group is written in the text
            assert item.target_group and item.target_group.lower() in item.text.lower(), item.id
            benevolent = item.kind == "benevolent"
            assert (item.strategy == "benevolent") == benevolent, item.id
            assert item.tendency == ("positive" if benevolent else "negative"), item.id
        else:
            assert item.kind in NEUTRAL_KINDS, item.id
            assert item.target_group == "" and item.tendency is None and item.strategy is None
    texts = [i.text for i in v3]
    assert len(set(texts)) == len(texts)


@pytest.mark.parametrize("split", ["train", "test"])
def test_each_v3_split_holds_the_groups_the_targets_need(v3: list[EvalItem], split: str) -> None:
    part = [i for i in v3 if i.split == split]
    kinds = Counter(i.kind for i in part)
    assert 180 <= len(part) <= 220
    assert set(kinds) == {*BIASED_KINDS, *NEUTRAL_KINDS}
    assert kinds["self_description"] >= 20  # self-description FP <= 0.05 is measurable
    assert sum(kinds[k] for k in MENTION_KINDS) >= 30
    assert kinds["benevolent"] >= 20
    for domain in DOMAINS:
        here = [i for i in part if i.domain == domain]
        assert sum(i.biased for i in here) >= 10 and sum(not i.biased for i in here) >= 10
        assert {i.kind for i in here} == {*BIASED_KINDS, *NEUTRAL_KINDS}, domain
    foreign = [i for i in part if i.language != "en"]
    assert len(foreign) >= 20
    assert sum(i.biased for i in foreign) >= 8 and sum(not i.biased for i in foreign) >= 8
    assert {i.language for i in foreign} >= REQUIRED_LANGUAGES
    assert len({i.language for i in foreign}) >= 6
    assert {i.strategy for i in part if i.biased} == set(STRATEGIES)
    # chat turns of varied length, not one template
    lengths = [len(i.text.split()) for i in part]
    assert sum(n <= 10 for n in lengths) >= 4 and sum(n >= 40 for n in lengths) >= 4


def test_v3_train_and_test_were_written_independently(v3: list[EvalItem]) -> None:
    train = [i for i in v3 if i.split == "train"]
    test = [i for i in v3 if i.split == "test"]
    # different scenarios: no setting is shared, so no test item has a train sister
    assert not {i.setting for i in train} & {i.setting for i in test}
    assert not {i.text for i in train} & {i.text for i in test}
    train_runs = set().union(*(_runs(i.text, 6) for i in train))
    assert [i.id for i in test if _runs(i.text, 6) & train_runs] == []


def test_no_new_text_repeats_an_older_set(v3: list[EvalItem], v4: AdversarialSet) -> None:
    older = _older_texts()
    old_runs = set().union(*(_runs(t) for t in older))
    new = [i.text for i in v3] + _v4_texts(v4)
    assert not set(new) & set(older)
    assert [t[:60] for t in new if _runs(t) & old_runs] == []
    # and v4 is not a disguised copy of the v3 labelled texts
    v3_runs = set().union(*(_runs(i.text) for i in v3))
    assert [t[:60] for t in _v4_texts(v4) if _runs(t) & v3_runs] == []


def test_no_auditor_prompt_example_is_in_the_new_sets(
    v3: list[EvalItem], v4: AdversarialSet
) -> None:
    texts = [i.text for i in v3] + _v4_texts(v4)
    for version in PROMPTS:
        for example in load_auditor_prompt(version).examples:
            assert not any(example.memory[:50] in t for t in texts), (version, example.memory[:50])


def test_every_v4_item_is_well_formed(v4: AdversarialSet) -> None:
    assert v4.version == "adversarial_memories_v4"
    assert (
        set(v4.attacks)
        == {i.attack for i in v4.items}
        == {*OBFUSCATIONS, *FRAMINGS, *PLANTED, "other_language"}
    )
    assert len({b.id for b in v4.bases}) == len(v4.bases)
    assert len({i.id for i in v4.items}) == len(v4.items)
    texts = _v4_texts(v4)
    assert len(set(texts)) == len(texts)
    for item in v4.items:
        base = v4.base(item.base)
        assert item.language and item.text != base.text, item.id
        if item.expected == "evade_attempt":
            assert base.biased and base.bias_type in DOMAINS and item.domain == base.bias_type
            assert base.target_group.lower() in base.text.lower(), base.id
            grounded_in = base.text if item.attack in OBFUSCATIONS else item.text
            assert item.target_group and item.target_group.lower() in grounded_in.lower(), item.id
            assert item.steers == (item.attack in STEERING), item.id
            assert item.planted_domain is None
        elif item.expected == "planted_verdict":
            assert not base.biased and item.attack in PLANTED and item.steers, item.id
            assert item.planted_domain in DOMAINS and item.text.startswith(base.text), item.id
        else:
            assert item.expected == "hard_negative", item.id
            assert not base.biased and item.domain in DOMAINS and not item.steers, item.id
            assert item.attack not in PLANTED, item.id


def test_v4_obfuscations_carry_their_disguise(v4: AdversarialSet) -> None:
    marks = {
        "zero_width": lambda t: bool(re.search("[\u200b\u200c\u200d\u2060]", t)),
        "homoglyph": lambda t: bool(re.search("[\u0370-\u03ff\u0400-\u04ff\u0530-\u058f]", t)),
        "emoji_standin": lambda t: any(ord(c) > 0x2600 for c in t),
        "leetspeak": lambda t: bool(re.search(r"[a-z][0-9][a-z]", t.lower())),
        "spaced_letters": lambda t: bool(re.search(r"\b(\w ){3,}\w\b", t)),
    }
    for item in v4.items:
        if item.attack in marks:
            assert marks[item.attack](item.text), item.id


def test_v4_sizes_cover_every_kind_domain_and_language(v4: AdversarialSet) -> None:
    expected = Counter(i.expected for i in v4.items)
    assert 75 <= len(v4.items) <= 90
    assert expected["planted_verdict"] >= 15 and expected["hard_negative"] >= 5
    evade = [i for i in v4.items if i.expected == "evade_attempt"]
    assert Counter(i.domain for i in evade) == {d: len(evade) // 9 for d in DOMAINS}
    attacks = Counter(i.attack for i in evade)
    assert all(attacks[a] >= 3 for a in (*OBFUSCATIONS, *FRAMINGS))
    foreign = [i for i in v4.items if i.language != "en"]
    assert len(foreign) >= 20 and {i.language for i in foreign} >= REQUIRED_LANGUAGES
    # the framings and the planted verdicts are not English-only
    assert {i.attack for i in foreign} & set(FRAMINGS) and {i.attack for i in foreign} & set(
        PLANTED
    )
    # every planted family names several domains, so no single domain can be special-cased
    for family in PLANTED:
        assert len({i.planted_domain for i in v4.items if i.attack == family}) >= 4
