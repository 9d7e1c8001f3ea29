"""GBV, AGBV, ΔGBV, MP, bootstrap CI, noise floor and paired differences: hand-computed cases."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dmt_bench import gbv as m
from dmt_bench import stats


def test_perfectly_fair_model_has_gbv_zero() -> None:
    assert m.gbv({"White": 70.0, "Black": 70.0, "Asian": 70.0, "Hispanic": 70.0}) == 0.0
    assert m.gbv_from_scores({"a": [60, 80], "b": [70, 70], "c": [75, 65]}) == 0.0


def test_known_gaps_give_their_exact_gbv() -> None:
    # two groups 20 apart: mean 50, deviations ±10 -> sqrt((100 + 100) / 2) = 10
    assert m.gbv({"Western": 60.0, "Non-Western": 40.0}) == pytest.approx(10.0)
    # 70, 60, 50: deviations 10, 0, -10 -> sqrt(200 / 3)
    assert m.gbv({"a": 70.0, "b": 60.0, "c": 50.0}) == pytest.approx(math.sqrt(200 / 3))
    # one group of four 20 below the others: mean 55 -> sqrt((25 * 3 + 225) / 4) = sqrt(75)
    means = {"White": 60.0, "Black": 40.0, "Asian": 60.0, "Hispanic": 60.0}
    assert m.gbv(means) == pytest.approx(math.sqrt(75))
    # from raw scores: group means 75 and 65 -> 5
    assert m.gbv_from_scores({"x": [70, 80], "y": [60, 70]}) == pytest.approx(5.0)


def test_empty_groups_and_nan_are_left_out() -> None:
    assert m.group_means({"a": [1.0, math.nan, 3.0], "b": [], "c": [math.nan]}) == {"a": 2.0}
    assert m.gbv_from_scores({"a": [60], "b": [40], "c": []}) == pytest.approx(10.0)
    assert math.isnan(m.gbv({"only": 50.0}))
    assert math.isnan(m.gbv({}))
    assert math.isnan(m.gbv({"a": math.nan, "b": 3.0}))


def test_agbv_delta_and_mitigation_percentage() -> None:
    assert m.agbv({"race": 2.0, "gender": 4.0}) == 3.0
    assert math.isnan(m.agbv({"race": 2.0, "gender": math.nan}))
    assert m.agbv({"race": 2.0, "gender": math.nan}, skip_nan=True) == 2.0
    assert math.isnan(m.agbv({}))
    assert m.delta_gbv(7.5, 5.0) == 2.5
    # paper Table 2, Mem0 / DeepSeek auditor: +5.65 -> +2.55 is a 54.9 % reduction
    assert m.mitigation_percentage(2.55, 5.65) == pytest.approx(-54.867, abs=1e-3)
    assert m.mitigation_percentage(-1.0, -2.0) == pytest.approx(50.0)
    assert math.isnan(m.mitigation_percentage(1.0, 0.0))
    assert math.isnan(m.mitigation_percentage(math.nan, 1.0))


def _contexts(gap: float, n: int, noise: float = 0.0) -> dict[str, dict[str, float]]:
    return {
        f"c{i}": {"a": 50 + gap / 2 + noise * ((i % 3) - 1), "b": 50 - gap / 2} for i in range(n)
    }


def test_bootstrap_ci_over_identical_contexts_is_a_point() -> None:
    ci = m.bootstrap_ci(_contexts(10, 8), n_resamples=200, seed=1)
    assert ci.low == pytest.approx(5.0) and ci.high == pytest.approx(5.0)


def test_bootstrap_is_seeded_and_needs_two_contexts() -> None:
    ctx = _contexts(10, 12, noise=6)
    assert m.bootstrap_gbv(ctx, n_resamples=50, seed=3) == m.bootstrap_gbv(
        ctx, n_resamples=50, seed=3
    )
    ci = m.bootstrap_ci(ctx, n_resamples=500, seed=3)
    assert ci.low <= m.gbv_of_contexts(ctx) <= ci.high
    assert m.bootstrap_gbv({"c0": {"a": 1.0, "b": 2.0}}) == []
    assert math.isnan(m.bootstrap_ci({"c0": {"a": 1.0, "b": 2.0}}).low)


def test_agbv_replicates_average_matched_replicates() -> None:
    assert stats.mean_of_matched_replicates({"x": [1.0, 3.0], "y": [3.0, 5.0]}) == [2.0, 4.0]
    assert stats.mean_of_matched_replicates({"x": [1.0], "y": []}) == []


def test_noise_floor_separates_a_real_gap_from_none() -> None:
    fair = {f"c{i}": {"a": float(i), "b": float(i)} for i in range(10)}
    floor = m.permutation_noise_floor(fair, n_permutations=200, seed=0)
    assert floor.mean == 0.0 and floor.p95 == 0.0 and floor.p_value == 1.0
    biased = _contexts(10, 20)
    floor = m.permutation_noise_floor(biased, n_permutations=500, seed=0)
    assert m.gbv_of_contexts(biased) == pytest.approx(5.0)
    assert floor.p95 < 5.0 and floor.p_value < 0.01
    empty = m.permutation_noise_floor({})
    assert empty.n == 0 and math.isnan(empty.p_value)


def test_paired_differences_by_hand() -> None:
    ctx = {
        "c1": {"a": 70.0, "b": 60.0, "c": 65.0},
        "c2": {"a": 80.0, "b": 74.0},
        "c3": {"a": 50.0, "b": 48.0, "c": 40.0},
    }
    pairs = {(p.a, p.b): p for p in m.paired_differences(ctx)}
    ab = pairs[("a", "b")]
    assert ab.n == 3 and ab.mean == pytest.approx(6.0)  # 10, 6, 2
    assert ab.sd == pytest.approx(4.0)
    assert ab.ci_low == pytest.approx(6 - 1.96 * 4 / math.sqrt(3))
    ac = pairs[("a", "c")]
    assert ac.n == 2 and ac.mean == pytest.approx(7.5)  # 5, 10
    one = m.paired_differences({"c": {"a": 1.0, "b": 0.0}})[0]
    assert one.n == 1 and math.isnan(one.sd)
    none = m.paired_differences({"c": {"a": 1.0}}, ["a", "b"])[0]
    assert none.n == 0 and math.isnan(none.mean)


scores = st.floats(min_value=0, max_value=100, allow_nan=False)


# deadline=None: hypothesis's default 200 ms per example is a pace a loaded machine can miss.
@settings(deadline=None)
@given(value=scores, k=st.integers(min_value=2, max_value=6))
def test_identical_groups_have_gbv_zero(value: float, k: int) -> None:
    assert m.gbv({f"g{i}": value for i in range(k)}) == pytest.approx(0.0, abs=1e-9)


@settings(deadline=None)
@given(
    means=st.lists(scores, min_size=2, max_size=6),
    shift=st.floats(min_value=-100, max_value=100, allow_nan=False),
)
def test_gbv_is_invariant_to_adding_a_constant(means: list[float], shift: float) -> None:
    base = {f"g{i}": v for i, v in enumerate(means)}
    moved = {g: v + shift for g, v in base.items()}
    assert m.gbv(moved) == pytest.approx(m.gbv(base), abs=1e-7)
    # and flipping the scale (risk inversion 100 - s) leaves it unchanged too
    flipped = {g: 100 - v for g, v in base.items()}
    assert m.gbv(flipped) == pytest.approx(m.gbv(base), abs=1e-7)


def test_mean_of_groups_is_the_gbv_centre() -> None:
    # 70, 60, 50 -> 60; a group without a finite mean is not one of the K
    assert m.mean_of_groups({"a": 70.0, "b": 60.0, "c": 50.0}) == pytest.approx(60.0)
    assert m.mean_of_groups({"a": 70.0, "b": math.nan}) == 70.0
    assert math.isnan(m.mean_of_groups({}))
    # group means 75 (x) and 65 (y) over two contexts -> 70; unequal counts weigh groups equally
    ctx = {"c1": {"x": 70.0, "y": 60.0}, "c2": {"x": 80.0, "y": 70.0}, "c3": {"x": 75.0}}
    assert m.mean_of_contexts(ctx) == pytest.approx((75.0 + 65.0) / 2)


def test_every_group_shifting_moves_the_mean_not_gbv() -> None:
    # the pilot in issue 18: memories lowered every group by about 5 points
    before = {"c1": {"a": 75.0, "b": 69.0}, "c2": {"a": 74.0, "b": 70.0}}
    after = {c: {g: v - 5.0 for g, v in s.items()} for c, s in before.items()}
    assert m.gbv_of_contexts(after) == pytest.approx(m.gbv_of_contexts(before))
    assert m.mean_of_contexts(after) - m.mean_of_contexts(before) == pytest.approx(-5.0)
    # with one seed the resamples are the same, so every replicate moves by exactly −5
    b = m.bootstrap_mean_of_groups(before, n_resamples=50, seed=4)
    a = m.bootstrap_mean_of_groups(after, n_resamples=50, seed=4)
    assert [y - x for x, y in zip(b, a, strict=True)] == pytest.approx([-5.0] * 50)
    assert m.bootstrap_mean_of_groups({"c1": before["c1"]}, n_resamples=50) == []


def test_bootstrap_contexts_shares_its_draws_between_statistics() -> None:
    ctx = {"c1": {"a": 10.0, "b": 20.0}, "c2": {"a": 30.0, "b": 30.0}, "c3": {"a": 0.0}}
    gbvs = stats.bootstrap_clusters(ctx, m.gbv_from_scores, n_resamples=30, seed=9)
    assert gbvs == m.bootstrap_gbv(ctx, n_resamples=30, seed=9)
