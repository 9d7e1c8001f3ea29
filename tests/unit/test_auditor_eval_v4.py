"""The held-out set of issue 37: ``auditor_eval_v4``.

Written by hand before any judge change, by an author who had not seen the judge. These tests
check what makes it usable as that yardstick: its size and splits, every item's fields (kinds,
strategies, grounded target groups, exchange turns that rebuild the stored text), all nine
domains, every kind and every biased speaker in both splits, enough non-English text in
several scripts, and no text copied from an older auditor evaluation set or adversarial set.
Data only: no auditor is run here.
"""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from dmt_bench.auditor_eval.dataset import (
    DATASET_V2,
    DATASET_V3,
    DATASET_V4,
    DATASET_VERSION,
    EvalItem,
    dataset_path,
    load_items,
)
from dmt_proxy.domains import DOMAINS
from dmt_proxy.resources import data_dir

SPLITS = ("train", "test")
BIASED_KINDS = ("judgment", "benevolent", "fiction_endorsed")
NEUTRAL_KINDS = (
    "self_description", "mention_fact", "mention_law", "mention_research", "mention_support",
    "reported_rejected", "question", "fiction_unendorsed",
)  # fmt: skip
KINDS = (*BIASED_KINDS, *NEUTRAL_KINDS, "exchange")
STRATEGIES = ("generalisation", "treatment", "endorsed_report", "benevolent", "fiction_endorsed")
SPEAKERS = ("user", "assistant", "both", "none")
OLDER_EVAL = (DATASET_VERSION, DATASET_V2, DATASET_V3)
OLDER_ADVERSARIAL = tuple(f"adversarial_memories_v{n}" for n in range(1, 6))
SCRIPTS = {
    "cyrillic": re.compile("[\u0400-\u04ff]"),
    "greek": re.compile("[\u0370-\u03ff]"),
    "arabic": re.compile("[\u0600-\u06ff]"),
    "devanagari": re.compile("[\u0900-\u097f]"),
    "kana": re.compile("[\u3040-\u30ff]"),
    "han": re.compile("[\u4e00-\u9fff]"),
}
"""Non-Latin scripts, each found by one Unicode block."""
SHARED_RUN = 8
"""Words in a row that no v4 text may share with an older one (a copy or close paraphrase)."""
ID = re.compile(r"^v4-(train|test)-([a-z]+)-\d{2}$")


@pytest.fixture(scope="module")
def v4() -> list[EvalItem]:
    return load_items(dataset_path(DATASET_V4))


def _split(items: list[EvalItem], split: str) -> list[EvalItem]:
    return [i for i in items if i.split == split]


def _runs(text: str, n: int = SHARED_RUN) -> set[tuple[str, ...]]:
    words = text.lower().split()
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def test_v4_is_sized_and_split(v4: list[EvalItem]) -> None:
    assert len(v4) >= 360
    assert len({i.id for i in v4}) == len(v4)
    assert len({i.text for i in v4}) == len(v4)
    for split in SPLITS:
        items = _split(v4, split)
        assert len(items) >= 180, split
        biased = sum(i.biased for i in items)
        assert 0.4 <= biased / len(items) <= 0.6, split


def test_v4_items_are_well_formed(v4: list[EvalItem]) -> None:
    for item in v4:
        match = ID.match(item.id)
        assert match is not None, item.id
        assert match[1] == item.split and match[2] == (item.domain or "none"), item.id
        assert item.domain is None or item.domain in DOMAINS, item.id
        assert item.kind in KINDS and item.setting and item.language, item.id
        if item.biased:
            assert item.kind in (*BIASED_KINDS, "exchange"), item.id
            assert item.domain is not None and item.strategy in STRATEGIES, item.id
            assert item.tendency in ("negative", "positive"), item.id
            assert item.target_group and item.target_group in item.text, item.id
        else:
            assert item.kind in (*NEUTRAL_KINDS, "exchange"), item.id
            assert item.strategy is None and item.tendency is None, item.id
            assert item.target_group == "", item.id
        if item.kind == "benevolent":
            assert item.strategy == "benevolent" and item.tendency == "positive", item.id
        if item.kind == "fiction_endorsed":
            assert item.strategy == "fiction_endorsed", item.id


def test_v4_exchanges_rebuild_their_text(v4: list[EvalItem]) -> None:
    exchanges = [i for i in v4 if i.kind == "exchange"]
    assert any(i.turns and i.turns[-1].text == "" for i in exchanges)  # an empty assistant turn
    for item in v4:
        if item.kind != "exchange":
            assert item.turns is None and item.biased_speaker is None, item.id
            continue
        assert item.turns is not None and item.biased_speaker in SPEAKERS, item.id
        assert [t.speaker for t in item.turns] == ["user", "assistant"], item.id
        user, assistant = (t.text for t in item.turns)
        assert item.text == f"User: {user}\nAssistant: {assistant}", item.id
        assert user.strip(), item.id
        assert item.biased == (item.biased_speaker != "none"), item.id
        if item.biased_speaker == "user":
            assert item.target_group in user, item.id
        elif item.biased_speaker == "assistant":
            assert item.target_group in assistant, item.id


def test_every_kind_speaker_and_domain_is_in_both_splits(v4: list[EvalItem]) -> None:
    for split in SPLITS:
        items = _split(v4, split)
        assert set(KINDS) == {i.kind for i in items}, split
        speakers = Counter(i.biased_speaker for i in items if i.kind == "exchange")
        assert set(speakers) == set(SPEAKERS) and min(speakers.values()) >= 5, split
        assert {i.domain for i in items} == set(DOMAINS), split
        assert {i.domain for i in items if i.biased} == set(DOMAINS), split
        for kind in ("judgment", "benevolent", "self_description"):
            domains = Counter(i.domain for i in items if i.kind == kind)
            assert set(domains) == set(DOMAINS), (split, kind)


def test_v4_is_multilingual_in_several_scripts(v4: list[EvalItem]) -> None:
    other = [i for i in v4 if i.language != "en"]
    assert len(other) >= 0.3 * len(v4)
    assert len({i.language for i in other}) >= 6
    scripts = {name for name, block in SCRIPTS.items() if any(block.search(i.text) for i in v4)}
    assert len(scripts) >= 2, scripts
    for split in SPLITS:
        items = _split(v4, split)
        share = sum(i.language != "en" for i in items) / len(items)
        assert share >= 0.3, split
        assert sum(i.biased for i in items if i.language != "en") >= 20, split


def test_v4_repeats_no_older_set(v4: list[EvalItem]) -> None:
    older = [i.text for version in OLDER_EVAL for i in load_items(dataset_path(version))]
    for version in OLDER_ADVERSARIAL:
        data = json.loads((data_dir("adversarial") / f"{version}.json").read_text("utf-8"))
        older += [b["text"] for b in data["bases"]] + [i["text"] for i in data["items"]]
    old_runs = set().union(*(_runs(t) for t in older))
    assert not {i.text for i in v4} & set(older)
    assert [i.id for i in v4 if _runs(i.text) & old_runs] == []
