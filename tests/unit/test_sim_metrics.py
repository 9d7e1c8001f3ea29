"""ΔAGBV, MP, the joint paired bootstrap and the Table 2 assembly, on hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmt_bench import gbv as g
from dmt_bench import paired as m
from dmt_bench.dib.report import context_scores
from dmt_bench.dib.scorer import DecisionResult, Method, Outcome, ScoringConfig
from dmt_bench.sim.config import parse_config
from dmt_bench.sim.records import AuditRecord, TurnRecord
from dmt_bench.sim.report import cell_text, render_table2, table2_rows
from dmt_bench.sim.results import CompareResults, arch_result, heatmap_matrix
from dmt_bench.sim.stream import summarize
from dmt_bench.stats import mean_of_finite_replicates


def test_delta_agbv_uses_domains_finite_at_both_ends() -> None:
    assert m.delta_agbv({"a": 3.0, "b": 5.0}, {"a": 1.0, "b": 2.0}) == pytest.approx(2.5)
    assert m.delta_agbv({"a": 3.0, "b": math.nan}, {"a": 1.0, "b": 2.0}) == pytest.approx(2.0)
    assert math.isnan(m.delta_agbv({}, {}))


def test_mp_matches_the_paper_formula() -> None:
    # Table 2, Mem0 / DeepSeek: baseline +5.65, DMT +2.55 -> ↓54.9 %
    assert m.mitigation_percentage(2.55, 5.65) == pytest.approx(-54.87, abs=0.01)
    assert math.isnan(m.mitigation_percentage(1.0, 0.0))
    reps = m.mp_replicates(np.array([1.0, 2.0, 3.0]), np.array([2.0, 0.0, np.nan]))
    assert reps[0] == pytest.approx(-50.0) and np.isnan(reps[1]) and np.isnan(reps[2])


def contexts(rows: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return rows


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 100), st.floats(0, 100), st.floats(0, 100)), min_size=1, max_size=8
    )
)
def test_numpy_gbv_equals_the_reference(rows: list[tuple[float, float, float]]) -> None:
    ctx = {f"c{i}": {"x": a, "y": b, "z": c} for i, (a, b, c) in enumerate(rows)}
    ids = sorted(ctx)
    identity = np.arange(len(ids))[None, :]
    tensor = m._tensor(ctx, ids, ["x", "y", "z"])
    assert m.gbv_rows(tensor[identity])[0] == pytest.approx(g.gbv_of_contexts(ctx), abs=1e-9)


def test_joint_bootstrap_pairs_conditions_and_checkpoints() -> None:
    base = {"c1": {"x": 10.0, "y": 20.0}, "c2": {"x": 30.0, "y": 30.0}, "c3": {"x": 5.0, "y": 0.0}}
    shifted = {c: {k: v + 7.0 for k, v in s.items()} for c, s in base.items()}
    reps = m.joint_bootstrap({"a": {"d": base}, "b": {"d": shifted}}, n_resamples=200, seed=3)
    # A uniform shift leaves GBV unchanged; with paired draws every replicate agrees exactly.
    assert np.allclose(reps["a"]["d"], reps["b"]["d"])
    assert np.std(reps["a"]["d"]) > 0
    again = m.joint_bootstrap({"a": {"d": base}, "b": {"d": shifted}}, n_resamples=200, seed=3)
    assert np.array_equal(again["a"]["d"], reps["a"]["d"])
    assert m.joint_bootstrap({"a": {"d": base}}, n_resamples=0) == {"a": {}}


def test_positive_off_diagonal() -> None:
    matrix = {"age": {"age": 5.0, "race": -1.0, "ses": 2.0}, "race": {"age": 0.5, "race": 9.0}}
    assert m.positive_off_diagonal(matrix) == (2, 3)


def decision(domain: str, ctx: str, group: str, score: float) -> DecisionResult:
    return DecisionResult(sample_id=f"{ctx}/{group}", domain=domain, group=group, context_id=ctx,
                          outcome=Outcome.SCORED, method=Method.PARSED, raw=score, score=score)  # fmt: skip


def audit(t: int, gap: float, memories: int = 0) -> AuditRecord:
    """Two domains, two contexts each, groups a/b; group b is `gap` points lower."""
    results = [
        decision(d, f"{d}-{i}", grp, 50.0 + i - (gap if grp == "b" else 0.0))
        for d in ("age", "race")
        for i in range(2)
        for grp in ("a", "b")
    ]
    return AuditRecord(t=t, memories=memories, scoring=ScoringConfig(), elapsed_s=1.0,
                       results=results)  # fmt: skip


def test_table2_assembly_hand_computed() -> None:
    # GBV of two groups = |gap| / 2, in both domains, so AGBV = gap / 2.
    config = parse_config({"turns": 10, "interval": 5, "conditions": ["baseline", "ssp", "dmt"],
                           "dib": {"bootstrap": 100, "permutations": 20}})  # fmt: skip
    audits = {
        "baseline": {0: audit(0, 2.0), 5: audit(5, 6.0, 5), 10: audit(10, 10.0, 10)},
        "ssp": {0: audit(0, 2.0), 5: audit(5, 4.0, 5), 10: audit(10, 8.0, 10)},
        "dmt": {0: audit(0, 2.0), 5: audit(5, 2.0, 5), 10: audit(10, 4.0, 10)},
    }
    turns = {"dmt": [TurnRecord(t=1, question_id=1, injected=True, domain="age", strategy=None,
                                reply="", latency_s=1.0, memory_status="tagged")]}  # fmt: skip
    arch = arch_result(config, [], "mem0", audits, turns)
    deltas = {(d.condition, d.t): d for d in arch.deltas}
    assert config.t80() == 10 and set(deltas) == {("baseline", 10), ("ssp", 10), ("dmt", 10)}
    assert deltas[("baseline", 10)].delta.value == pytest.approx(4.0)  # (10 − 2) / 2
    assert deltas[("ssp", 10)].delta.value == pytest.approx(3.0)
    assert deltas[("dmt", 10)].delta.value == pytest.approx(1.0)
    assert deltas[("ssp", 10)].mp.value == pytest.approx(-25.0)  # type: ignore[union-attr]
    assert deltas[("dmt", 10)].mp.value == pytest.approx(-75.0)  # type: ignore[union-attr]
    assert deltas[("baseline", 10)].mp is None
    assert deltas[("dmt", 10)].per_domain == {"age": pytest.approx(1.0), "race": pytest.approx(1.0)}
    rows = {(r.condition, r.t): r for r in arch.checkpoints}
    assert (
        rows[("baseline", 5)].agbv.value == pytest.approx(3.0)
        and rows[("baseline", 5)].memories == 5
    )
    dmt_turns = next(s for s in arch.turns if s.condition == "dmt")
    assert (dmt_turns.tagged, dmt_turns.tagged_injected, dmt_turns.tagged_neutral) == (1, 1, 0)

    results = CompareResults(name="t", digest="d" * 64, config=config.model_dump(mode="json"),
                             turns=10, t80=10, checkpoints=[0, 5, 10], dib_decisions=8,
                             stream=summarize([]), archs=[arch], latency={}, wall_s=60.0)  # fmt: skip
    table = table2_rows(results)
    assert table[0] == ["Memory", "t", "No mitigation", "SSP", "DMT"]
    assert table[1][:2] == ["mem0", "10 (t80, T)"]
    assert table[1][2].startswith("+4.00 [") and table[1][4].endswith("(↓75.0%)")
    assert "ΔAGBV" in render_table2(results)


def test_t80_is_a_separate_row_when_it_differs_from_t() -> None:
    config = parse_config({"turns": 100, "interval": 20, "conditions": ["baseline"],
                           "dib": {"bootstrap": 10, "permutations": 10}})  # fmt: skip
    audits = {"baseline": {t: audit(t, 2.0 + t / 10) for t in config.checkpoints()}}
    arch = arch_result(config, [], "letta", audits, {})
    assert [(d.condition, d.t) for d in arch.deltas] == [("baseline", 80), ("baseline", 100)]
    assert arch.deltas[0].delta.value == pytest.approx(4.0)


def test_heatmap_matrix_and_cell_text() -> None:
    audits = {"age": {0: audit(0, 2.0), 4: audit(4, 6.0)}, "race": {0: audit(0, 2.0)}}
    matrix = heatmap_matrix(4, audits)
    assert matrix == {"age": {"age": pytest.approx(2.0), "race": pytest.approx(2.0)}}
    from dmt_bench.stats import Estimate, Interval

    assert cell_text(
        Estimate(value=1.234, ci=Interval(low=-0.5, high=2.0)), Estimate.of(-35.0)
    ) == ("+1.23 [-0.50, +2.00] (↓35.0%)")
    assert cell_text(Estimate.of(None)) == "n/a [n/a, n/a]"


def test_one_context_per_domain_has_no_ci() -> None:
    one = {"d": {"c1": {"x": 10.0, "y": 20.0}}}
    assert m.joint_bootstrap({"a": one, "b": one}, n_resamples=50) == {"a": {}, "b": {}}
    assert math.isnan(m.interval(mean_of_finite_replicates({})).low)


# -- per-domain CIs, mean shift, both readouts, power (sim-results-v2) -------------------


def test_a_thin_domain_leaves_the_other_domains_their_replicates() -> None:
    three = {"c1": {"x": 10.0, "y": 20.0}, "c2": {"x": 30.0, "y": 30.0}, "c3": {"x": 5.0, "y": 0.0}}
    one = {"k1": {"x": 10.0, "y": 20.0}}
    reps = m.joint_bootstrap({"a": {"thick": three, "thin": one}}, n_resamples=50, seed=1)
    assert set(reps["a"]) == {"thick"} and len(reps["a"]["thick"]) == 50
    # an aggregate needs every domain of its point estimate
    assert m.covering(reps["a"], ["thick", "thin"]) == {}
    assert set(m.covering(reps["a"], ["thick"])) == {"thick"}
    assert m.covering(reps["a"], []) == {}


def test_mean_replicates_follow_a_uniform_shift_exactly() -> None:
    base = {"c1": {"x": 10.0, "y": 20.0}, "c2": {"x": 30.0, "y": 30.0}, "c3": {"x": 5.0, "y": 0.0}}
    down = {c: {k: v - 4.0 for k, v in s.items()} for c, s in base.items()}
    reps = m.joint_bootstrap({"a": {"d": base}, "b": {"d": down}}, n_resamples=100, seed=2,
                             statistic="mean")  # fmt: skip
    assert np.allclose(reps["b"]["d"] - reps["a"]["d"], -4.0)
    # the centre of GBV: (mean x + mean y) / 2 = (15 + 16.67) / 2
    identity = np.arange(3)[None, :]
    tensor = m._tensor(base, sorted(base), ["x", "y"])
    assert m._mean_rows(tensor[identity])[0] == pytest.approx((15.0 + 50.0 / 3) / 2)


def test_mde_is_2_8_standard_errors_of_the_replicates() -> None:
    reps = np.array([1.0, 2.0, 3.0, 4.0, np.nan])  # sd of the finite ones: sqrt(5/3)
    assert m.mde(reps) == pytest.approx(2.8015852 * math.sqrt(5 / 3), abs=1e-6)
    assert math.isnan(m.mde(np.array([])))


def shifted_audit(t: int, gap: float, shift: float, thin_race: bool = False) -> AuditRecord:
    """Age: 3 contexts, group b `gap` lower, every score moved by `shift`; written = 50."""
    results = [
        DecisionResult(sample_id=f"age-{i}/{grp}", domain="age", group=grp, context_id=f"age-{i}",
                       outcome=Outcome.SCORED, method=Method.EXPECTED,
                       raw=50.0 + i + shift - (gap if grp == "b" else 0.0),
                       score=50.0 + i + shift - (gap if grp == "b" else 0.0), greedy=50)
        for i in range(3)
        for grp in ("a", "b")
    ]  # fmt: skip
    for i in range(1 if thin_race else 3):
        results += [
            DecisionResult(sample_id=f"race-{i}/{grp}", domain="race", group=grp,
                           context_id=f"race-{i}", outcome=Outcome.SCORED,
                           method=Method.EXPECTED, raw=60.0 + i * (grp == "a"),
                           score=60.0 + i * (grp == "a"), greedy=60)
            for grp in ("a", "b")
        ]  # fmt: skip
    return AuditRecord(t=t, memories=0, scoring=ScoringConfig(), elapsed_s=1.0, results=results)


def test_mean_shift_is_reported_next_to_delta_agbv_hand_computed() -> None:
    # Memory lowers every age score by 5 and widens nothing: ΔGBV_age = 0, Δs̄_age = −5;
    # race does not move. ΔAGBV = 0, mean shift = (−5 + 0) / 2 = −2.5.
    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline", "dmt"],
                           "dib": {"bootstrap": 200, "permutations": 20}})  # fmt: skip
    audits = {
        "baseline": {0: shifted_audit(0, 2.0, 0.0), 10: shifted_audit(10, 2.0, -5.0)},
        "dmt": {0: shifted_audit(0, 2.0, 0.0), 10: shifted_audit(10, 2.0, -1.0)},
    }
    arch = arch_result(config, [], "mem0", audits, {})
    rows = {d.condition: d for d in arch.deltas}
    base = rows["baseline"].readouts["expected"]
    assert base.delta.value == pytest.approx(0.0, abs=1e-12)
    assert base.mean_shift.value == pytest.approx(-2.5)
    # a uniform shift is the same in every resample: its CI is the point
    assert (base.mean_shift.ci.low, base.mean_shift.ci.high) == pytest.approx((-2.5, -2.5))
    assert base.per_domain_shift["age"].value == pytest.approx(-5.0)
    assert rows["dmt"].readouts["expected"].mean_shift.value == pytest.approx(-0.5)
    # the written integer never moved: no shift, no GBV
    written = rows["baseline"].readouts["written"]
    assert written.mean_shift.value == 0.0 and written.delta.value == 0.0
    assert arch.contexts == {"age": 3, "race": 3}
    row = next(r for r in arch.checkpoints if (r.condition, r.t) == ("baseline", 10))
    assert row.readouts["expected"].means["age"].value == pytest.approx(51.0 - 5.0 - 1.0)


def test_a_thin_domain_removes_aggregate_cis_only_and_spans_zero_is_unknown() -> None:
    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline", "dmt"],
                           "dib": {"bootstrap": 100, "permutations": 20}})  # fmt: skip
    audits = {
        c: {0: shifted_audit(0, 2.0, 0.0, True), 10: shifted_audit(10, 4.0, 0.0, True)}
        for c in ("baseline", "dmt")
    }
    arch = arch_result(config, [], "mem0", audits, {})
    rows = {d.condition: d for d in arch.deltas}
    head = rows["dmt"].readouts["expected"]
    assert arch.contexts == {"age": 3, "race": 1}
    assert head.per_domain["age"].value == pytest.approx(1.0)  # GBV 1 -> 2
    assert math.isfinite(head.per_domain["age"].ci.low)  # age keeps its own CI
    assert math.isnan(head.per_domain["race"].ci.low)
    assert math.isnan(rows["dmt"].delta.ci.low) and head.mde is None and head.mp is not None
    # no baseline CI: whether it spans 0 is unknown (it used to say True)
    assert rows["dmt"].base_ci_spans_zero is None and head.base_ci_spans_zero is None
    results = CompareResults(name="t", digest="d" * 64, config=config.model_dump(mode="json"),
                             turns=10, t80=10, checkpoints=[0, 10], dib_decisions=10,
                             stream=summarize([]), archs=[arch], latency={}, wall_s=1.0)  # fmt: skip
    text = render_table2(results)
    assert "race had a single DIB context" in text
    assert "one DIB context per domain" not in text


def test_base_ci_spans_zero_is_true_or_false_when_the_ci_exists() -> None:
    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline", "dmt"],
                           "dib": {"bootstrap": 200, "permutations": 20}})  # fmt: skip
    audits = {c: {0: shifted_audit(0, 2.0, 0.0), 10: shifted_audit(10, 8.0, 0.0)}
              for c in ("baseline", "dmt")}  # fmt: skip
    arch = arch_result(config, [], "mem0", audits, {})
    dmt = next(d for d in arch.deltas if d.condition == "dmt")
    assert dmt.base_ci_spans_zero is False  # baseline ΔAGBV is +1.5 in every resample
    assert dmt.readouts["expected"].mde is None  # ... so its SE is 0: no MDE


def test_mde_of_a_row_is_that_of_its_paired_replicates() -> None:
    import random

    rng = random.Random(7)

    def noisy(t: int) -> AuditRecord:
        results = [
            DecisionResult(sample_id=f"{d}-{i}/{g}", domain=d, group=g, context_id=f"{d}-{i}",
                           outcome=Outcome.SCORED, method=Method.EXPECTED,
                           raw=(v := rng.uniform(40, 80)), score=v, greedy=round(v))
            for d in ("age", "race") for i in range(6) for g in ("a", "b", "c")
        ]  # fmt: skip
        return AuditRecord(t=t, memories=0, scoring=ScoringConfig(), elapsed_s=1.0,
                           results=results)  # fmt: skip

    config = parse_config({"turns": 10, "interval": 10, "conditions": ["baseline", "dmt"],
                           "dib": {"bootstrap": 300, "permutations": 20}})  # fmt: skip
    audits = {c: {0: noisy(0), 10: noisy(10)} for c in ("baseline", "dmt")}
    arch = arch_result(config, [], "mem0", audits, {})
    row = next(d for d in arch.deltas if d.condition == "dmt").readouts["expected"]
    cells = {
        (c, t): context_scores(a.results) for c, by_t in audits.items() for t, a in by_t.items()
    }
    reps = m.joint_bootstrap(cells, n_resamples=300, seed=config.seed)
    d_reps = m.delta_replicates(reps[("dmt", 10)], reps[("dmt", 0)])
    b_reps = m.delta_replicates(reps[("baseline", 10)], reps[("baseline", 0)])
    assert row.mde == pytest.approx(m.mde(d_reps)) and row.mde > 0  # type: ignore[operator]
    assert row.mde_vs_base == pytest.approx(m.mde(d_reps - b_reps))
