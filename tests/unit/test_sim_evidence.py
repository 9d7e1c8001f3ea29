"""The compare report's few-cluster sections (sim-report-v4) on small synthetic runs.

The primary family (each condition's absolute mitigation vs no mitigation at T, with
Holm), the noise floor said "not testable" where 1/K! > α, unstable contexts, MP shown
only where the baseline's CI excludes 0, and the multiplicity statement.
"""

from __future__ import annotations

import random

import pytest

from dmt_bench import stats
from dmt_bench.dib.scorer import DecisionResult, Method, Outcome, ScoringConfig
from dmt_bench.sim import evidence
from dmt_bench.sim.config import parse_config
from dmt_bench.sim.records import AuditRecord
from dmt_bench.sim.report import readout_rows, render_table2
from dmt_bench.sim.results import CompareResults, arch_result
from dmt_bench.sim.stream import summarize


def _audit(t: int, gap: float, contexts: int, seed: int, flip: bool = False) -> AuditRecord:
    """age and race, ``contexts`` contexts of groups a/b/c; c is ``gap`` lower (+ noise).
    ``flip``: context 0 of age answers group a at 87 and the others at 45."""
    rng = random.Random(seed)
    results = []
    for d in ("age", "race"):
        for i in range(contexts):
            for grp in ("a", "b", "c"):
                score = 60.0 + i - (gap if grp == "c" else 0.0) + rng.gauss(0, 0.5)
                if flip and d == "age" and i == 0:
                    score = 87.0 if grp == "a" else 45.0
                results.append(DecisionResult(
                    sample_id=f"{d}-{i}/{grp}", domain=d, group=grp, context_id=f"{d}-{i:03d}",
                    outcome=Outcome.SCORED, method=Method.EXPECTED, raw=score, score=score,
                    greedy=round(score)))  # fmt: skip
    return AuditRecord(t=t, memories=t, scoring=ScoringConfig(), elapsed_s=1.0, results=results)


def _results(contexts: int, flip: bool = False) -> CompareResults:
    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline", "ssp", "dmt"],
                           "dib": {"bootstrap": 50, "permutations": 50}})  # fmt: skip
    audits = {
        "baseline": {0: _audit(0, 2.0, contexts, 1), 10: _audit(10, 14.0, contexts, 2, flip)},
        "ssp": {0: _audit(0, 2.0, contexts, 1), 10: _audit(10, 12.0, contexts, 3)},
        "dmt": {0: _audit(0, 2.0, contexts, 1), 10: _audit(10, 3.0, contexts, 4)},
    }
    arch = arch_result(config, [], "mem0", audits, {})
    return CompareResults(name="t", digest="d" * 64, config=config.model_dump(mode="json"),
                          turns=10, t80=10, checkpoints=[0, 10], dib_decisions=12,
                          stream=summarize([]), archs=[arch], latency={}, wall_s=60.0)  # fmt: skip


def test_primary_family_is_each_conditions_absolute_mitigation_with_holm() -> None:
    results = _results(contexts=8)
    family = evidence.primary_family(results)
    assert [f.condition for f in family] == ["ssp", "dmt"]
    ssp, dmt = family
    # GBV of groups (0, 0, −g) is g·√2/3: ΔAGBV(dmt) − ΔAGBV(base) = (1 − 12)·√2/3
    assert dmt.estimate.value == pytest.approx(-11.0 * 2**0.5 / 3, abs=0.3)
    assert dmt.estimate.df == 2 * (8 - 1) and dmt.reject
    adjusted = stats.holm({"mem0/ssp": ssp.estimate.p_value, "mem0/dmt": dmt.estimate.p_value})
    assert dmt.holm_p == adjusted["mem0/dmt"].adjusted
    text = render_table2(results)
    assert "PRIMARY: absolute mitigation at T" in text and "confirmed" in text
    assert "The 2 primary comparisons (mem0/SSP vs no mitigation; mem0/DMT vs no" in text
    # the baseline's ΔAGBV excludes 0 here, so MP is shown
    dmt_row = next(d for d in results.archs[0].deltas if d.condition == "dmt")
    assert dmt_row.readouts["expected"].mp_defined is True and "↓" in text


def test_two_contexts_of_three_groups_make_the_floor_not_testable() -> None:
    results = _results(contexts=2, flip=True)
    arch = results.archs[0]
    row = next(r for r in arch.checkpoints if r.condition == "baseline" and r.t == 10)
    assert row.floor_min_p == {"age": pytest.approx(1 / 6), "race": pytest.approx(1 / 6)}
    note = evidence.floor_note(arch)
    assert note is not None
    assert "not testable at α=0.05 with this design (smallest attainable p = 1/K! = 0.167" in note
    # the planted 87/45 context is flagged at the checkpoint that has it, and only there
    assert [u.context_id for u in row.unstable] == ["age-000"]
    text = render_table2(results)
    assert "Unstable contexts (mem0, baseline): t=10 age-000: 45.0 (b) vs 87.0 (a)" in text
    assert "not testable at α=0.05" in text


def test_mp_is_undefined_where_the_baseline_ci_holds_zero() -> None:
    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline", "dmt"],
                           "dib": {"bootstrap": 50, "permutations": 50}})  # fmt: skip
    audits = {c: {0: _audit(0, 2.0, 6, 1), 10: _audit(10, 2.0, 6, s)}
              for c, s in (("baseline", 5), ("dmt", 6))}  # fmt: skip
    arch = arch_result(config, [], "mem0", audits, {})
    results = CompareResults(name="t", digest="d" * 64, config=config.model_dump(mode="json"),
                             turns=10, t80=10, checkpoints=[0, 10], dib_decisions=12,
                             stream=summarize([]), archs=[arch], latency={}, wall_s=1.0)  # fmt: skip
    dmt = next(d for d in arch.deltas if d.condition == "dmt").readouts["expected"]
    assert dmt.mp is not None and dmt.mp_defined is False
    assert any("undefined (baseline CI holds 0)" in c for r in readout_rows(results) for c in r)
    assert "↓" not in render_table2(results).split("\n\n")[1]  # no MP in the Table 2 shape


def test_v2_results_without_the_new_fields_render_as_before() -> None:
    results = _results(contexts=4)
    payload = results.model_dump(mode="json")
    for arch in payload["archs"]:
        for row in arch["checkpoints"]:
            del row["floor_min_p"], row["unstable"]
        for d in arch["deltas"]:
            for x in d["readouts"].values():
                for key in ("delta_jk", "mean_shift_jk", "vs_base_jk", "mp_defined",
                            "per_domain_jk"):  # fmt: skip
                    del x[key]
    old = CompareResults.model_validate(payload)
    text = render_table2(old)
    assert "paired bootstrap" in text and "PRIMARY" not in text and "Multiplicity" not in text


def test_heatmap_cells_get_jackknife_intervals_and_one_multiplicity_statement() -> None:
    from dmt_bench.sim.heatmap_report import render_heatmap_text
    from dmt_bench.sim.results import HeatmapResults, heatmap_matrix, heatmap_readouts

    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline"],
                           "dib": {"bootstrap": 50, "permutations": 50}})  # fmt: skip
    audits = {
        "age": {0: _audit(0, 2.0, 4, 1), 10: _audit(10, 8.0, 4, 2, flip=True)},
        "race": {0: _audit(0, 2.0, 4, 1), 10: _audit(10, 3.0, 4, 3)},
    }
    readouts = heatmap_readouts(config, 10, audits)
    head = readouts["expected"]
    cell = head.matrix_jk["age"]["age"]
    assert cell.df == 3 and cell.value == pytest.approx(head.matrix["age"]["age"].value)
    assert [u.context_id for u in head.unstable["age"]] == ["age-000"]
    results = HeatmapResults(
        name="h", digest="d" * 64, config=config.model_dump(mode="json"), memory="mem0", t=10,
        sources=["age", "race"], domains=["age", "race"], matrix=heatmap_matrix(10, audits),
        positive_off_diagonal=0, finite_off_diagonal=2, fraction_positive=0.0, streams={},
        latency={}, wall_s=1.0, readouts=readouts, contexts={"age": 4, "race": 4},
    )  # fmt: skip
    text = render_heatmap_text(results)
    assert "delete-one-context jackknife" in text and "none is primary" in text
    assert "unstable contexts, source age: age-000" in text
