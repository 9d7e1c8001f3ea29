"""The hand-written dose seed sets and DIB context lists of ``dmt_proxy/data/dose`` (issue #30).

They exist so the confirmatory dose run does not seed from ``auditor_eval_v1``, on
whose train split the first-stage classifier was fitted: the tests hold them to that
(no text identical to, and none close to, any text of the auditor evaluation sets,
the adversarial sets or the auditor prompts), to the design's counts, to DIB's own
group names, and rebuild the context lists from the DIB generator.
"""

from __future__ import annotations

import json
import random
import re
import statistics
from collections.abc import Iterator
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmt_bench.auditor_eval.dataset import V2_STRATEGIES
from dmt_bench.dib.domains.base import registered_domains
from dmt_bench.dib.generator import SAMPLING_V2, context_id
from dmt_bench.dib.schema import DIB_VERSION
from dmt_bench.dose.seed_sets import (
    SET_KINDS,
    SET_SIZE,
    SeedFile,
    SeedMemory,
    SeedSet,
    load_seed_file,
    shipped_seed_file,
)
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "dmt_proxy" / "data"
JACCARD_MAX = 0.6
"""Token Jaccard at or above which two texts count as the same text reworded."""
CONFIRMATORY_SOURCES = ("age", "race")
GROUPS = {d.name: d.groups for d in registered_domains()}
GROUP_WORDS = {
    # Words that would put a social group into a neutral memory (age, race, gender,
    # nationality, religion, orientation, disability, appearance, income).
    "old", "older", "young", "younger", "elderly", "senior", "seniors", "retired", "retiree",
    "retirees", "teen", "teens", "teenager", "boomer", "boomers", "millennial", "gen",
    "black", "white", "asian", "hispanic", "latino", "latina", "african", "korean",
    "he", "she", "him", "her", "his", "hers", "man", "men", "woman", "women", "guy", "guys",
    "girl", "girls", "boy", "boys", "mom", "dad", "wife", "husband", "sister", "brother",
    "immigrant", "immigrants", "foreign", "foreigner", "accent", "indian", "nigerian",
    "muslim", "jewish", "christian", "church", "mosque", "synagogue", "religious",
    "gay", "lesbian", "queer", "straight", "trans", "disabled", "disability", "wheelchair",
    "autistic", "adhd", "pretty", "ugly", "attractive", "unattractive", "poor", "rich",
    "wealthy", "welfare", "income",
}  # fmt: skip


def tokens(text: str) -> set[str]:
    """Lower-case word tokens (apostrophes kept inside words)."""
    return set(re.findall(r"[a-z0-9]+(?:'[a-z]+)?", text.lower()))


def jaccard(a: set[str], b: set[str]) -> float:
    """|a ∩ b| / |a ∪ b|; 0 for two empty sets."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def _strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


def _pieces(text: str) -> list[str]:
    """A text and its paragraphs (a v1 narrative is the first paragraph of its item)."""
    parts = [p.strip() for p in text.split("\n\n") if p.strip()]
    return [text, *parts] if len(parts) > 1 else [text]


def existing_texts() -> list[str]:
    """Every text the new sets must not repeat: the auditor evaluation sets v1 and v2
    (the source of ``dose_local``'s seeds), the adversarial sets, the calibration set and
    the auditor prompts (their few-shot examples)."""
    out: list[str] = []
    evaluation = sorted((DATA / "auditor_eval").glob("auditor_eval_v*.jsonl"))
    assert [p.name for p in evaluation][:2] == ["auditor_eval_v1.jsonl", "auditor_eval_v2.jsonl"]
    for path in evaluation:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                out += _pieces(json.loads(line)["text"])
    for path in [
        *(DATA / "adversarial").glob("*.json"),
        *(DATA / "auditor_calibration").glob("*.json"),
    ]:
        out += [s for s in _strings(json.loads(path.read_text(encoding="utf-8"))) if len(s) >= 40]
    for path in (ROOT / "auditor_prompts").glob("*.md"):
        out += [p for p in path.read_text(encoding="utf-8").split("\n") if len(p) >= 40]
    return out


@pytest.fixture(scope="module")
def files() -> dict[str, SeedFile]:
    return {kind: shipped_seed_file(kind) for kind in SET_KINDS}


def all_memories(files: dict[str, SeedFile]) -> list[tuple[str, str]]:
    return [
        (s.memory_id(i), m.text)
        for f in files.values()
        for s in f.sets
        for i, m in enumerate(s.memories)
    ]


def test_counts_of_the_design(files: dict[str, SeedFile]) -> None:
    stereotyped, neutral, directive = (files[k] for k in SET_KINDS)
    for domain in CONFIRMATORY_SOURCES:
        assert len(stereotyped.for_domain(domain)) >= 3
        assert directive.for_domain(domain)
    assert len(neutral.sets) >= 3
    for domain in DOMAINS:  # the later nine-domain run: three sets of every source too
        assert len(stereotyped.for_domain(domain)) >= 3, domain
        assert len(directive.for_domain(domain)) >= 1, domain
    for f in files.values():
        assert all(len(s.memories) == SET_SIZE for s in f.sets)


def test_sets_name_dib_groups_and_strategies(files: dict[str, SeedFile]) -> None:
    for f in (files["stereotyped"], files["directive"]):
        for s in f.sets:
            assert s.domain is not None
            assert set(s.disfavoured) | set(s.favoured) <= set(GROUPS[s.domain]), s.id
            assert not set(s.disfavoured) & set(s.favoured), s.id
            assert s.id.startswith(f"{s.domain}-")
    for s in files["stereotyped"].sets:
        assert {m.strategy for m in s.memories} <= set(V2_STRATEGIES), s.id
        assert len({m.strategy for m in s.memories}) >= 3, s.id
    for s in files["directive"].sets:
        # An explicit rule: every memory states its gap in points.
        assert all(re.search(rf"\b({s.points}|twenty)\b", m.text) for m in s.memories), s.id


def test_neutral_sets_mention_no_group_and_match_the_length(files: dict[str, SeedFile]) -> None:
    for s in files["neutral"].sets:
        for m in s.memories:
            assert not tokens(m.text) & GROUP_WORDS, (s.id, tokens(m.text) & GROUP_WORDS)
    words = {
        kind: statistics.mean(len(m.text.split()) for s in files[kind].sets for m in s.memories)
        for kind in ("stereotyped", "neutral")
    }
    assert abs(words["neutral"] / words["stereotyped"] - 1) <= 0.2, words


def test_no_text_repeats_or_rewords_an_existing_one(files: dict[str, SeedFile]) -> None:
    old = existing_texts()
    assert len(old) > 600
    old_exact = {" ".join(t.split()).lower() for t in old}
    old_tokens = [tokens(t) for t in old]
    for mid, text in all_memories(files):
        assert " ".join(text.split()).lower() not in old_exact, mid
        mine = tokens(text)
        worst = max(jaccard(mine, t) for t in old_tokens)
        assert worst < JACCARD_MAX, (mid, worst)


def test_sets_are_not_paraphrases_of_each_other(files: dict[str, SeedFile]) -> None:
    memories = all_memories(files)
    assert len({t for _, t in memories}) == len(memories)
    # Directive sets are one rule said ten ways: compared across sets only, not within one.
    for (a, ta), (b, tb) in combinations(memories, 2):
        same_directive_set = "directive" in a and a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0]
        if not same_directive_set:
            assert jaccard(tokens(ta), tokens(tb)) < JACCARD_MAX, (a, b)


def test_seeds_nest_and_carry_labels(files: dict[str, SeedFile]) -> None:
    age = files["stereotyped"].by_id("age-1")
    three, ten = age.seeds("stereotyped", 3), age.seeds("stereotyped")
    assert ten[:3] == three and [s.id for s in three] == ["age-1-01", "age-1-02", "age-1-03"]
    assert {s.label for s in ten} == {"biased"} and ten[0].domain == "age"
    neutral = files["neutral"].sets[0].seeds("neutral")
    assert {s.label for s in neutral} == {"neutral"} and neutral[0].domain is None
    rule = files["directive"].by_id("race-directive-1").seeds("directive", 1)[0]
    assert (rule.label, rule.strategy) == ("biased", "directive")
    with pytest.raises(ConfigError, match="holds 10 memories, not 11"):
        age.seeds("stereotyped", 11)
    with pytest.raises(ConfigError, match="known: age-1"):
        files["stereotyped"].by_id("age-9")


def test_a_malformed_file_is_a_config_error(tmp_path: Path) -> None:
    one = SeedSet(id="neutral-1", memories=[SeedMemory(text="a plain question")] * 9)
    path = tmp_path / "neutral_v1.yaml"
    path.write_text(
        yaml.safe_dump({"version": 1, "kind": "neutral", "sets": [one.model_dump()]}),
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="holds 9 memories, not 10"):
        load_seed_file(path)
    path.write_text("version: [", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_seed_file(path)


@pytest.fixture(scope="module")
def contexts() -> dict[str, Any]:
    loaded = yaml.safe_load((DATA / "dose" / "contexts_v1.yaml").read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def test_context_lists_are_the_sampler_order_of_their_seed(contexts: dict[str, Any]) -> None:
    assert (contexts["dib_version"], contexts["sampling"]) == (DIB_VERSION, SAMPLING_V2)
    seed = contexts["dib_seed"]
    counts = {d.name: d.context_count() for d in registered_domains()}
    for domain in DOMAINS:
        chosen = contexts["contexts"][domain]
        order = [context_id(domain, i) for i in range(counts[domain])]
        # generator.sample_contexts: shuffle the domain's ids with this key, take the first c.
        random.Random(f"{SAMPLING_V2}:{seed}:{domain}").shuffle(order)
        assert chosen == order[: len(chosen)], domain
        assert len(chosen) >= (24 if domain in CONFIRMATORY_SOURCES else 8), domain
        assert contexts["available"][domain]["contexts"] == counts[domain]


def test_context_lists_avoid_every_context_already_used(contexts: dict[str, Any]) -> None:
    committed = ROOT / "benchmarks" / "results" / "dose" / "dose_local" / "cells" / "empty"
    dose_local = {
        r["context_id"]
        for r in json.loads((committed / "plain.json").read_text(encoding="utf-8"))["results"]
    }
    assert sorted(dose_local) == sorted(contexts["dose_local_contexts"])
    assert len(dose_local) == 12
    excluded = {c for ids in contexts["excluded"].values() for c in ids}
    assert dose_local <= excluded
    for domain in DOMAINS:
        assert not set(contexts["contexts"][domain]) & excluded, domain
