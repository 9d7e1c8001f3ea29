"""paired.leave_one_out / linear_jackknife: contexts dropped jointly across cells."""

from __future__ import annotations

import pytest

from dmt_bench import paired as m
from dmt_bench import stats


def test_a_mean_shift_difference_is_the_one_sample_t_interval_of_its_context_differences() -> None:
    # s̄ of a cell is the mean over contexts of the context's mean (same groups everywhere),
    # so Δs̄ between two cells is the mean of per-context differences: its jackknife-t
    # interval must be exactly the one-sample t interval of those differences.
    before = {f"c{i}": {"a": 50.0 + i, "b": 40.0 + i} for i in range(5)}
    shifts = [1.0, 3.0, 2.0, 6.0, 0.5]
    after = {f"c{i}": {g: v + shifts[i] for g, v in before[f"c{i}"].items()} for i in range(5)}
    cells = {"t0": {"age": before}, "t1": {"age": after}}
    values = {k: m.mean_by_domain(v) for k, v in cells.items()}
    loo = m.leave_one_out(cells, statistic="mean")
    est = m.linear_jackknife(values, loo, m.domain_weights(["t1"], ["t0"], "age"))
    want = stats.cluster_jackknife(shifts, lambda xs: sum(xs) / len(xs))
    assert est.value == pytest.approx(want.value) and est.df == 4
    assert (est.low, est.high) == pytest.approx((want.ci.low, want.ci.high))


def test_weights_cancel_a_shared_key_and_average_over_finite_domains() -> None:
    values = {"a": {"x": 1.0, "y": 2.0, "z": float("nan")}, "b": {"x": 0.0, "y": 0.0, "z": 1.0}}
    w = m.delta_weights(values, ["a"], ["b"])
    assert w == {("a", "x"): 0.5, ("b", "x"): -0.5, ("a", "y"): 0.5, ("b", "y"): -0.5}
    assert m.domain_weights(["a", "b"], ["b", "c"], "x") == {
        ("a", "x"): 1.0,
        ("b", "x"): 0.0,
        ("c", "x"): -1.0,
    }
    # a domain with one context has no leave-one-out values: no interval
    one = {"k": {"age": {"c1": {"a": 1.0, "b": 2.0}}}}
    assert m.leave_one_out(one) == {"k": {}}
    est = m.linear_jackknife({"k": {"age": 0.5}}, {"k": {}}, {("k", "age"): 1.0})
    assert est.df == 0 and est.value == 0.5
