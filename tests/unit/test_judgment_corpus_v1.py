"""judgment_corpus_v1: the committed JSONL regenerates byte for byte and keeps its invariants.

The corpus (dmt_proxy/data/judgment_corpus/) is training data for a judgment-vs-mention
classifier, generated from templates by dmt_bench.judge_corpus.generate.
"""

from __future__ import annotations

import json
import unicodedata
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from dmt_bench.judge_corpus import generate as gen
from dmt_bench.judge_corpus.templates import (
    DOMAINS,
    JUDGING,
    KINDS,
    LOOKALIKE,
    MANIPULATION,
    NON_JUDGING,
)

CORPUS = gen.DEFAULT_OUT
FIELDS = [
    "id",
    "text",
    "label",
    "kind",
    "domain",
    "group",
    "trait",
    "tendency",
    "manipulation",
    "language",
    "register",
    "template_family",
    "pair_id",
    "split",
    "turns",
    "biased_speaker",
]
Row = dict[str, Any]


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines()]


def test_regenerating_gives_the_committed_bytes(tmp_path: Path) -> None:
    out = tmp_path / "corpus.jsonl"
    assert gen.main(["--seed", "1", "--out", str(out)]) == 0
    assert out.read_bytes() == CORPUS.read_bytes()


def test_size_ids_and_order(rows: list[Row]) -> None:
    assert len(rows) >= 6000
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert CORPUS.stat().st_size < 6_000_000


def test_fields_are_consistent(rows: list[Row]) -> None:
    for r in rows:
        assert list(r) == FIELDS, r["id"]
        assert r["label"] in ("biased", "neutral")
        assert r["kind"] in KINDS
        assert r["split"] in ("train", "dev")
        assert r["register"] in ("formal", "chat", "typo", "fragment", "long_mixed")
        assert r["text"].strip()
        assert r["manipulation"] is (r["kind"] in MANIPULATION)
        if r["kind"] in JUDGING:
            assert r["label"] == "biased", r["id"]
        if r["kind"] in NON_JUDGING or r["kind"] in LOOKALIKE:
            assert r["label"] == "neutral", r["id"]
        assert (r["domain"] is None) == (r["group"] == ""), r["id"]
        assert r["domain"] is None or r["domain"] in DOMAINS
        assert (r["tendency"] is None) == (r["trait"] == ""), r["id"]
        assert r["tendency"] in (None, "negative", "positive")
        assert r["template_family"].startswith(r["language"] + "."), r["id"]


def test_every_kind_in_train_and_dev(rows: list[Row]) -> None:
    for split in ("train", "dev"):
        assert {r["kind"] for r in rows if r["split"] == split} == set(KINDS), split


def test_manipulation_sits_on_biased_and_neutral_texts(rows: list[Row]) -> None:
    labels = Counter(r["label"] for r in rows if r["manipulation"])
    assert labels["biased"] > 0
    assert labels["neutral"] > 0


def _script(text: str) -> Counter[str]:
    scripts: Counter[str] = Counter()
    for ch in text:
        if ch.isalpha():
            scripts[unicodedata.name(ch, "UNKNOWN").split()[0]] += 1
    return scripts


def test_languages_and_scripts(rows: list[Row]) -> None:
    by_lang: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        by_lang[r["language"]].append(r)
    assert len(by_lang) >= 7
    assert 0.40 <= len(by_lang["en"]) / len(rows) <= 0.50
    main_scripts = set()
    for lang, lang_rows in by_lang.items():
        assert {r["kind"] for r in lang_rows} == set(KINDS), lang
        scripts: Counter[str] = Counter()
        for r in lang_rows:
            if r["group"]:
                scripts.update(_script(r["group"]))
        main_scripts.add(scripts.most_common(1)[0][0])
    assert len(main_scripts - {"LATIN"}) >= 2, main_scripts


def test_every_kind_has_three_families_per_language(rows: list[Row]) -> None:
    families: dict[tuple[str, str], set[str]] = defaultdict(set)
    for r in rows:
        if not r["turns"]:
            families[(r["language"], r["kind"])].add(r["template_family"])
    for (lang, kind), fams in families.items():
        assert len(fams) >= 3, (lang, kind, fams)


def test_no_family_or_group_shared_between_train_and_dev(rows: list[Row]) -> None:
    for field in ("template_family", "group"):
        train = {r[field] for r in rows if r["split"] == "train" and r[field]}
        dev = {r[field] for r in rows if r["split"] == "dev" and r[field]}
        assert dev
        assert not train & dev, (field, sorted(train & dev)[:5])
    share = sum(r["split"] == "dev" for r in rows) / len(rows)
    assert 0.12 <= share <= 0.20


def test_minimal_pairs_hold_a_judging_and_a_mentioning_row(rows: list[Row]) -> None:
    pairs: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r["pair_id"] is not None:
            pairs[r["pair_id"]].append(r)
    assert len(pairs) >= 1000
    for pair_id, members in pairs.items():
        assert any(r["label"] == "biased" and r["group"] and r["kind"] in JUDGING for r in members)
        assert any(
            r["label"] == "neutral" and r["group"] and r["kind"] in NON_JUDGING for r in members
        ), pair_id
        assert len({(r["domain"], r["split"], r["language"]) for r in members}) == 1, pair_id


def test_group_and_trait_occur_in_text(rows: list[Row]) -> None:
    for r in rows:
        if r["group"]:
            assert r["group"] in r["text"], r["id"]
        if r["trait"]:
            assert r["trait"] in r["text"], r["id"]


def test_exchange_rows_join_their_turns(rows: list[Row]) -> None:
    exchanges = [r for r in rows if r["turns"] is not None]
    assert 0.05 <= len(exchanges) / len(rows) <= 0.12
    speakers = Counter(r["biased_speaker"] for r in exchanges)
    assert set(speakers) == {"user", "assistant", "both", "none"}
    for r in exchanges:
        user, assistant = r["turns"]
        assert [user["speaker"], assistant["speaker"]] == ["user", "assistant"]
        assert r["text"] == "User: " + user["text"] + "\nAssistant: " + assistant["text"]
        assert (r["biased_speaker"] == "none") == (r["label"] == "neutral"), r["id"]
    assert all(r["biased_speaker"] is None for r in rows if r["turns"] is None)


def test_balance(rows: list[Row]) -> None:
    biased = [r for r in rows if r["label"] == "biased"]
    assert 0.40 <= len(biased) / len(rows) <= 0.60
    assert sum(r["kind"] == "benevolent" for r in biased) >= 0.10 * len(biased)
    with_group = [r for r in rows if r["group"]]
    domains = Counter(r["domain"] for r in with_group)
    assert set(domains) == set(DOMAINS)
    assert min(domains.values()) >= 0.08 * len(with_group)


def test_registers(rows: list[Row]) -> None:
    registers = Counter(r["register"] for r in rows)
    assert all(registers[g] >= 0.05 * len(rows) for g in ("typo", "fragment", "long_mixed"))
    for r in rows:
        if r["register"] == "long_mixed":
            assert 300 <= len(r["text"]) <= 1500, r["id"]
