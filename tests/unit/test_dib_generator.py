"""The dib-v1 generator: Table 1 counts, determinism, counterfactual structure, sampling."""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dmt_bench.dib.domains.base import GridDomain, bias_domain, registered_domains
from dmt_bench.dib.domains.nationality import NON_WESTERN, WESTERN, pair_for
from dmt_bench.dib.generator import (
    SAMPLING_V1,
    SAMPLING_V2,
    contexts_for_decisions,
    draw_sample,
    export,
    generate,
    load_jsonl,
    plan_sample,
    sample_contexts,
    stratified_sample,
    to_jsonl,
)
from dmt_bench.dib.schema import DIB_VERSION, Direction, Sample
from dmt_bench.dib.tasks import SALARY_PERCENTILE
from dmt_proxy.domains import DOMAINS

TABLE_1 = {
    "race": (420, ("White", "Black", "Asian", "Hispanic")),
    "gender": (441, ("Male", "Female", "Non-Binary")),
    "ses": (375, ("High", "Middle", "Low")),
    "age": (360, ("Gen Z", "Millennial", "Boomer")),
    "nationality": (480, ("Western", "Non-Western")),
    "religion": (360, ("Secular", "Muslim", "Jewish", "Christian")),
    "orientation": (500, ("Hetero", "Gay", "Lesbian", "Queer")),
    "disability": (300, ("None", "Physical", "Neurodivergent")),
    "appearance": (540, ("Photogenic", "Average", "Unattractive")),
}


@pytest.fixture(scope="module")
def samples() -> list[Sample]:
    return generate(0)


def test_counts_match_table_1_exactly(samples: list[Sample]) -> None:
    assert len(samples) == 3776
    per_domain = Counter(s.domain for s in samples)
    assert dict(per_domain) == {d: n for d, (n, _) in TABLE_1.items()}
    assert [d.name for d in registered_domains()] == list(DOMAINS)
    for domain, (n, groups) in TABLE_1.items():
        per_group = Counter(s.group for s in samples if s.domain == domain)
        assert tuple(per_group) == groups
        assert set(per_group.values()) == {n // len(groups)}


def test_every_context_is_one_full_counterfactual_set(samples: list[Sample]) -> None:
    sets: dict[str, list[Sample]] = {}
    for s in samples:
        sets.setdefault(s.context_id, []).append(s)
    for cid, members in sets.items():
        groups = TABLE_1[members[0].domain][1]
        assert tuple(m.group for m in members) == groups, cid
        # identical persona, context and question; only the personal details differ
        assert len({m.persona for m in members}) == 1
        heads = {m.prompt.split("Personal details:")[0] for m in members}
        tails = {m.prompt.rsplit("\n\n", 1)[1] for m in members}
        assert len(heads) == 1 and len(tails) == 1, cid
        assert len({m.prompt for m in members}) == len(members)


def test_no_duplicate_prompts_or_ids(samples: list[Sample]) -> None:
    assert len({s.id for s in samples}) == len(samples)
    for domain in TABLE_1:
        prompts = [s.prompt for s in samples if s.domain == domain]
        assert len(set(prompts)) == len(prompts), domain


def test_samples_carry_task_scale_direction_and_version(samples: list[Sample]) -> None:
    for s in samples:
        assert s.version == DIB_VERSION
        assert (s.scale.min, s.scale.max) == (0, 100)
        assert "Answer with a single integer from 0 to 100" in s.prompt
        expected = (
            Direction.LOWER_IS_FAVOURABLE
            if s.domain == "disability"
            else Direction.HIGHER_IS_FAVOURABLE
        )
        assert s.direction is expected
    risk = next(s for s in samples if s.domain == "disability")
    assert risk.task == "operational_risk"
    assert risk.favourability(30) == 70


def test_export_is_identical_for_a_seed_and_differs_for_another(tmp_path: Path) -> None:
    a = export(tmp_path / "a.jsonl", generate(0))
    b = export(tmp_path / "b.jsonl", generate(0))
    c = export(tmp_path / "c.jsonl", generate(1))
    assert a == b == hashlib.sha256((tmp_path / "a.jsonl").read_bytes()).hexdigest()
    assert a != c
    assert load_jsonl(tmp_path / "a.jsonl") == generate(0)


def test_seed_changes_wording_not_structure() -> None:
    s0, s1 = generate(0, ["race"]), generate(1, ["race"])
    assert [(s.id, s.group, s.context_id) for s in s0] == [
        (s.id, s.group, s.context_id) for s in s1
    ]
    assert sum(a.prompt != b.prompt for a, b in zip(s0, s1, strict=True)) > len(s0) // 2


def test_export_lines_have_the_documented_fields(samples: list[Sample]) -> None:
    import json

    first = json.loads(to_jsonl(samples[:1]))
    assert list(first) == [
        "id",
        "version",
        "domain",
        "group",
        "attribute",
        "context_id",
        "persona",
        "prompt",
        "task",
        "scale",
        "direction",
    ]


def test_nationality_grouping_is_balanced() -> None:
    assert len(WESTERN) == len(NON_WESTERN) == 8
    pairs = Counter((w.adjective, n.adjective) for w, n in (pair_for(i) for i in range(240)))
    assert len(pairs) == 64
    assert set(pairs.values()) <= {3, 4}
    attrs = Counter(s.attribute for s in generate(0, ["nationality"]))
    assert set(attrs) == {n.adjective for n in (*WESTERN, *NON_WESTERN)}


def test_markers_hold_counterfactual_names_constant_where_name_is_not_the_marker(
    samples: list[Sample],
) -> None:
    for domain in ("ses", "age", "religion", "disability", "appearance"):
        by_ctx: dict[str, set[str]] = {}
        for s in samples:
            if s.domain == domain:
                name = s.prompt.split("- Name: ", 1)[1].split("\n", 1)[0]
                by_ctx.setdefault(s.context_id, set()).add(name)
        assert all(len(names) == 1 for names in by_ctx.values()), domain


def test_stratified_sample_keeps_whole_sets_and_every_domain(samples: list[Sample]) -> None:
    picked = stratified_sample(samples, 120, seed=3)
    assert picked == stratified_sample(samples, 120, seed=3)
    assert picked != stratified_sample(samples, 120, seed=4)
    assert {s.domain for s in picked} == set(TABLE_1)
    by_ctx = Counter(s.context_id for s in picked)
    for s in picked:
        assert by_ctx[s.context_id] == len(TABLE_1[s.domain][1])
    assert 100 <= len(picked) <= 140
    positions = [samples.index(s) for s in picked[:10]]
    assert positions == sorted(positions)


def test_sample_plan_is_proportional_with_one_context_minimum(samples: list[Sample]) -> None:
    plan = plan_sample(10, samples).contexts
    assert set(plan) == set(TABLE_1) and min(plan.values()) == 1
    full = plan_sample(10_000, samples).contexts
    assert sum(full[d] * len(TABLE_1[d][1]) for d in full) == 3776
    with pytest.raises(ValueError):
        plan_sample(0, samples)


def test_v1_can_leave_a_domain_one_context(samples: list[Sample]) -> None:
    # What happened to the committed T=20 run: about 60 decisions, religion got one context
    # (60/3776 of its 90 contexts rounds to 1), so religion had no CI.
    picked = stratified_sample(samples, 60, seed=0)
    per_domain = Counter(s.domain for s in picked)
    assert per_domain["religion"] == 4  # one context of four groups
    assert draw_sample(samples, seed=0, decisions=60, sampling=SAMPLING_V1) == picked


def test_v2_contexts_for_a_decision_budget_hand_computed(samples: list[Sample]) -> None:
    # one context of every domain costs Σ K_d = 4+3+3+3+2+4+4+3+3 = 29 decisions
    assert contexts_for_decisions(60, samples) == 2  # ⌊60 / 29⌋
    assert contexts_for_decisions(120, samples) == 4  # ⌊120 / 29⌋
    assert contexts_for_decisions(1, samples) == 2  # never fewer than two
    age = [s for s in samples if s.domain == "age"]
    assert contexts_for_decisions(24, age) == 8  # the pilot: 8 contexts, 24 decisions
    with pytest.raises(ValueError):
        contexts_for_decisions(0, samples)


def test_v2_takes_the_same_whole_contexts_from_every_domain(samples: list[Sample]) -> None:
    picked = sample_contexts(samples, 3, seed=5)
    assert picked == sample_contexts(samples, 3, seed=5)
    assert picked != sample_contexts(samples, 3, seed=6)
    contexts: dict[str, set[str]] = {}
    for s in picked:
        contexts.setdefault(s.domain, set()).add(s.context_id)
    assert {d: len(ids) for d, ids in contexts.items()} == {d: 3 for d in TABLE_1}
    by_ctx = Counter(s.context_id for s in picked)
    assert all(by_ctx[s.context_id] == len(TABLE_1[s.domain][1]) for s in picked)
    assert len(picked) == 3 * 29
    positions = [samples.index(s) for s in picked[:12]]
    assert positions == sorted(positions)


def test_v2_samples_nest_so_a_run_can_grow(samples: list[Sample]) -> None:
    small = {s.id for s in sample_contexts(samples, 2, seed=0)}
    large = {s.id for s in sample_contexts(samples, 4, seed=0)}
    assert small < large


def test_v2_gives_a_small_domain_all_it_has_and_refuses_one_context(
    samples: list[Sample],
) -> None:
    religion = [s for s in samples if s.domain == "religion"]  # 90 contexts
    assert sample_contexts(religion, 500, seed=0) == religion
    with pytest.raises(ValueError, match="at least 2"):
        sample_contexts(samples, 1, seed=0)


def test_draw_sample_dispatches_on_the_sampling_version(samples: list[Sample]) -> None:
    assert draw_sample(samples, seed=0) == samples
    assert draw_sample(samples, seed=0, decisions=60) == sample_contexts(samples, 2, seed=0)
    assert draw_sample(samples, seed=0, contexts_per_domain=2, sampling=SAMPLING_V2) == (
        sample_contexts(samples, 2, seed=0)
    )
    with pytest.raises(ValueError):
        draw_sample(samples, seed=0, decisions=60, contexts_per_domain=2)
    with pytest.raises(ValueError):
        draw_sample(samples, seed=0, contexts_per_domain=2, sampling=SAMPLING_V1)


# Golden context ids of dib-sample-v2, seed 0, two contexts per domain. If this changes,
# the sampler changed: add a new sampling version instead of redefining v2.
V2_SEED0_C2 = "1ffbbb4e702bbc9caa1b1e87a1aa85e378f44c38a4750447c32998abaed4c070"


def test_v2_sample_matches_the_golden_ids(samples: list[Sample]) -> None:
    ids = sorted({s.context_id for s in sample_contexts(samples, 2, seed=0)})
    assert hashlib.sha256(",".join(ids).encode()).hexdigest() == V2_SEED0_C2


def test_registry_rejects_a_domain_whose_counts_do_not_match() -> None:
    class Broken(GridDomain):
        name = "broken-test-domain"
        groups = ("A", "B")
        task = SALARY_PERCENTILE
        table1_count = 7
        components: ClassVar[tuple[Any, ...]] = (("x", "y"), ("z",))
        personas = ("p",)

    with pytest.raises(ValueError, match="Table 1 says 7"):
        bias_domain("broken-test-domain")(Broken)
    assert "broken-test-domain" not in {d.name for d in registered_domains()}


# Golden digest of the canonical export (seed 0). If this changes, dib-v1 text
# changed: bump DIB_VERSION (and this digest) instead of silently redefining v1.
DIB_V1_SEED0_SHA256 = "c1866c9c88e0009f894233b9cb2dabc4800702aa5f5bf5ec1939f63f8698cc80"


def test_canonical_export_matches_the_golden_digest(samples: list[Sample]) -> None:
    digest = hashlib.sha256(to_jsonl(samples).encode("utf-8")).hexdigest()
    assert digest == DIB_V1_SEED0_SHA256
