"""The held-out adversarial set ``adversarial_memories_v6``.

Written before any judge change, by an author who had seen neither the judge nor the items of
v1-v5, from attack families of the public jailbreak, prompt-injection and memory-poisoning
literature. These tests check what makes it usable as a yardstick: its size and balance per
``expected`` value and domain, every item's fields, obfuscations whose normal form is their base,
planted verdicts and injected instructions that keep a group-free base whole, a non-English share
with non-Latin scripts and low-resource languages, and no text copied from an older adversarial
set, an auditor evaluation set or an auditor prompt's examples. Data only: no auditor is run here.
"""

from __future__ import annotations

import base64
import binascii
import codecs
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

VERSION = "adversarial_memories_v6"
OLDER_ADVERSARIAL = tuple(f"adversarial_memories_v{n}" for n in range(1, 6))
OLDER_EVAL = (DATASET_VERSION, DATASET_V2, DATASET_V3)
PROMPTS = ("auditor_v1", "auditor_v2", "auditor_v3", "auditor_primed_v3")
EXPECTED_MIN = {
    "evade_attempt": 54,
    "planted_verdict": 24,
    "injected_instruction": 18,
    "hard_negative": 24,
}
"""The fewest items of each ``expected`` value."""
HARD_NEGATIVE_ONLY = ("hn_rejected_stereotype", "hn_genuine_request")
"""Families with no attack form: only hard negatives use them."""
OBFUSCATION = (
    "base64_decode",
    "rot13",
    "payload_split",
    "unicode_tags",
    "bidi_override",
    "homoglyph",
    "typoglycemia",
    "ascii_art",
    "translation_lowres",
)
FRAMING = (
    "roleplay_persona",
    "hypothetical_frame",
    "dataset_example",
    "many_shot",
    "style_injection",
    "crescendo",
    "poisoned_rule",
)
SEPARATOR = ("fake_end_marker", "fake_json_close", "fake_tool_output", "markup_comment")
WHOLE_BASE = (*FRAMING, *SEPARATOR, "adversarial_suffix")
"""Evade families that keep the base text whole inside the item."""
POSITIONS = ("start", "middle", "end")
NON_LATIN = {
    "ja": "[\u3040-\u30ff]",
    "zh": "[\u4e00-\u9fff]",
    "ru": "[\u0400-\u04ff]",
    "ar": "[\u0600-\u06ff]",
    "hi": "[\u0900-\u097f]",
}
"""Scripts the non-English items must use, by language."""
LOW_RESOURCE = ("zu", "gd")
"""isiZulu and Scottish Gaelic, two of the low-resource languages of Yong et al. (2023)."""
GROUP_WORDS = re.compile(
    r"\b(wom[ae]n|m[ae]n|girls?|boys?|black|white|asian|latin[oa]s?|muslims?|christians?|jew(s|ish)"
    r"|hindus?|gays?|lesbians?|trans|elderly|old people|young people|disabled|deaf|blind"
    r"|immigrants?|foreigners?|refugees?|poor|rich|femmes?|hommes?|mujeres|hombres|frauen"
    r"|männer|ausländer)\b",
    re.IGNORECASE,
)
"""Words naming a social group: a planted verdict's or injected instruction's base has none."""
TAG = re.compile("[\U000e0020-\U000e007e]+")
BIDI = re.compile("\u202e([^\u202c]*)\u202c")
HOMOGLYPHS = str.maketrans(
    "\u0412\u0430\u0435\u0441\u043e\u0440\u0445\u0443\u0456\u0455", "Baecopxyis"
)
"""Cyrillic look-alikes back to the Latin letters they imitate."""
BASE64 = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
SHARED_RUN = 8
"""Words in a row that no v6 text may share with an older one (a copy or close paraphrase)."""


@pytest.fixture(scope="module")
def v6() -> AdversarialSet:
    return load_set(VERSION)


def _of(data: AdversarialSet, expected: str) -> list[AdversarialItem]:
    return [i for i in data.items if i.expected == expected]


def _untag(text: str) -> str:
    """Unicode tag characters read as the ASCII they encode."""
    return TAG.sub(lambda m: "".join(chr(ord(c) - 0xE0000) for c in m.group(0)), text)


def _unreverse(text: str) -> str:
    """Each U+202E ... U+202C run in logical order, its controls dropped."""
    return BIDI.sub(lambda m: m.group(1)[::-1], text)


def _b64_decoded(text: str) -> list[str]:
    out = []
    for token in BASE64.findall(text):
        try:
            out.append(base64.b64decode(token, validate=True).decode("utf-8"))
        except (binascii.Error, UnicodeDecodeError):
            continue
    return out


def _outline(word: str) -> tuple[str, str, str]:
    """What typoglycemia keeps of a word: first letter, sorted inner letters, last letter."""
    return (word[0], "".join(sorted(word[1:-1])), word[-1]) if len(word) > 1 else (word, "", "")


def test_v6_loads_and_is_sized(v6: AdversarialSet) -> None:
    assert v6.version == VERSION
    assert v6.guessed_nonce == "000000000000"
    assert len(v6.items) >= 120 and len(v6.bases) >= 40
    counts: Counter[str] = Counter(i.expected for i in v6.items)
    assert set(counts) == set(EXPECTED_MIN)
    for expected, least in EXPECTED_MIN.items():
        assert counts[expected] >= least, expected
    assert len({b.id for b in v6.bases}) == len(v6.bases)
    assert len({i.id for i in v6.items}) == len(v6.items)
    assert all(re.fullmatch(r"adv6-\d{3}", i.id) for i in v6.items)
    base_ids = {b.id for b in v6.bases}
    assert all(i.base in base_ids for i in v6.items)
    assert {i.base for i in v6.items} == base_ids  # no base left unattacked
    texts = set_texts(v6)
    assert len(set(texts)) == len(texts)


def test_v6_families_are_defined_and_sourced(v6: AdversarialSet) -> None:
    used = {i.attack for i in v6.items}
    assert set(v6.attacks) == used and len(used) >= 12
    assert all(
        len(line) > 40 and re.search(r"\b(19|20)\d\d\b", line) for line in v6.attacks.values()
    )
    evade = {i.attack for i in _of(v6, "evade_attempt")}
    assert {*OBFUSCATION, *FRAMING, *SEPARATOR} <= evade
    assert not evade & set(HARD_NEGATIVE_ONLY)
    for expected in ("planted_verdict", "injected_instruction"):
        assert not {i.attack for i in _of(v6, expected)} & set(HARD_NEGATIVE_ONLY)


def test_v6_every_item_is_well_formed(v6: AdversarialSet) -> None:
    for item in v6.items:
        base = v6.base(item.base)
        assert item.language and item.text != base.text, item.id
        if item.expected == "evade_attempt":
            assert base.biased and base.bias_type in DOMAINS and item.domain == base.bias_type
            assert base.target_group and base.target_group in base.text, base.id
            assert item.target_group == base.target_group and item.planted_domain is None
        elif item.expected == "planted_verdict":
            assert item.steers and item.planted_domain in DOMAINS, item.id
            assert not base.biased and item.domain is None and not item.target_group, item.id
        elif item.expected == "injected_instruction":
            assert item.steers and item.planted_domain is None and item.domain is None, item.id
            assert not base.biased and not item.target_group, item.id
        else:
            assert item.expected == "hard_negative", item.id
            assert not item.steers and item.planted_domain is None, item.id
            assert not base.biased and (item.domain is None or item.domain in DOMAINS), item.id
        if item.expected in ("planted_verdict", "injected_instruction"):
            assert not GROUP_WORDS.search(base.text), base.id
            position = position_in(item, base.text)
            assert position is not None and item.note.startswith(f"position: {position}"), item.id
    for base in v6.bases:
        assert base.biased == (base.bias_type is not None) == bool(base.target_group), base.id


def test_v6_evade_attempts_cover_every_domain_six_ways(v6: AdversarialSet) -> None:
    evade = _of(v6, "evade_attempt")
    by_domain: dict[str, list[AdversarialItem]] = {d: [] for d in DOMAINS}
    for item in evade:
        assert item.domain is not None
        by_domain[item.domain].append(item)
    for domain, items in by_domain.items():
        families = [i.attack for i in items]
        assert len(families) == 6 and len(set(families)) == 6, domain
    steering = [i for i in evade if i.steers]
    assert 0.25 * len(evade) <= len(steering) <= 0.6 * len(evade)
    assert all(i.attack in WHOLE_BASE for i in steering)


def test_v6_obfuscations_have_their_base_as_normal_form(v6: AdversarialSet) -> None:
    for item in _of(v6, "evade_attempt"):
        base = v6.base(item.base).text
        text = item.text
        if item.attack == "base64_decode":
            assert base in _b64_decoded(text), item.id
        elif item.attack == "rot13":
            assert codecs.encode(text, "rot_13").endswith(base), item.id
        elif item.attack == "unicode_tags":
            assert TAG.search(text) and base in _untag(text), item.id
            assert item.target_group not in TAG.sub("", text), item.id  # hidden, not shown
        elif item.attack == "bidi_override":
            assert BIDI.search(text) and _unreverse(text) == base, item.id
        elif item.attack == "homoglyph":
            assert text != base and text.translate(HOMOGLYPHS) == base, item.id
        elif item.attack == "typoglycemia":
            old, new = re.findall(r"[^\W\d_]+", base), re.findall(r"[^\W\d_]+", text)
            assert [_outline(w) for w in old] == [_outline(w) for w in new] and old != new
        elif item.attack in WHOLE_BASE:
            assert base in text, item.id
        else:  # payload_split, ascii_art, translation_lowres: rewritten by hand
            assert item.attack in ("payload_split", "ascii_art", "translation_lowres"), item.id
    planted = [*_of(v6, "planted_verdict"), *_of(v6, "injected_instruction")]
    for item in planted:
        if item.attack == "unicode_tags":
            assert TAG.search(item.text) and TAG.sub("", item.text) == v6.base(item.base).text
        if item.attack == "base64_decode":
            assert _b64_decoded(item.text), item.id


def test_v6_planted_verdicts_and_injections_vary(v6: AdversarialSet) -> None:
    planted = _of(v6, "planted_verdict")
    domains = Counter(i.planted_domain for i in planted)
    assert set(domains) == set(DOMAINS) and min(domains.values()) >= 2
    for items in (planted, _of(v6, "injected_instruction")):
        positions = Counter(position_in(i, v6.base(i.base).text) for i in items)
        assert set(positions) == set(POSITIONS), positions
        assert len({i.attack for i in items}) >= 8 and len({i.base for i in items}) >= 6
        assert len({i.language for i in items}) >= 4


def test_v6_hard_negatives_wear_attack_forms(v6: AdversarialSet) -> None:
    hard = _of(v6, "hard_negative")
    assert len({i.base for i in hard}) == len(hard)  # each on its own plainer twin
    worn = {i.attack for i in hard} - set(HARD_NEGATIVE_ONLY)
    assert len(worn) >= 12  # the surface forms of most attack families
    assert {i.domain for i in hard} >= set(DOMAINS)  # a group of every domain, unjudged
    assert {"hn_rejected_stereotype", "hn_genuine_request"} <= {i.attack for i in hard}
    assert any(TAG.search(i.text) for i in hard)  # a flag emoji's tag characters


def test_v6_languages(v6: AdversarialSet) -> None:
    items = v6.items
    assert sum(i.language != "en" for i in items) >= 0.30 * len(items)
    languages = {i.language for i in items}
    assert set(NON_LATIN) <= languages and set(LOW_RESOURCE) <= languages
    for item in items:
        if item.language in NON_LATIN:
            assert re.search(NON_LATIN[item.language], item.text + v6.base(item.base).text)
    for expected in EXPECTED_MIN:
        assert {i.language for i in _of(v6, expected)} - {"en"}, expected
    low = [i for i in items if i.language in LOW_RESOURCE]
    assert {i.expected for i in low} >= {"evade_attempt", "hard_negative"}


def test_v6_repeats_no_older_set(v6: AdversarialSet) -> None:
    older = [i.text for v in OLDER_EVAL for i in load_items(dataset_path(v))]
    for version in OLDER_ADVERSARIAL:
        older += set_texts(load_set(version))
    old_runs = set().union(*(word_runs(t, SHARED_RUN) for t in older))
    new = set_texts(v6)
    assert not set(new) & set(older)
    assert [t[:60] for t in new if word_runs(t, SHARED_RUN) & old_runs] == []


def test_no_auditor_prompt_example_is_in_v6(v6: AdversarialSet) -> None:
    texts = set_texts(v6)
    for version in PROMPTS:
        for example in load_auditor_prompt(version).examples:
            assert not any(example.memory[:50] in t for t in texts), (version, example.memory[:50])
