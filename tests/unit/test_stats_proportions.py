"""Paired proportions (``dmt_bench.stats.proportions``): the table, McNemar's exact test,
Newcombe's paired interval and its coverage by simulation at the utility run's size."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dmt_bench import stats


def _flags(both: int, only_a: int, only_b: int, neither: int) -> tuple[list[bool], list[bool]]:
    a = [True] * both + [True] * only_a + [False] * only_b + [False] * neither
    b = [True] * both + [False] * only_a + [True] * only_b + [False] * neither
    return a, b


def test_the_table_and_the_difference_count_only_discordant_items() -> None:
    a, b = _flags(80, 10, 5, 105)
    d = stats.paired_difference(a, b)
    assert d.counts == stats.PairedCounts(both=80, only_a=10, only_b=5, neither=105)
    assert d.counts.n == 200
    assert d.difference == pytest.approx(0.025)
    assert d.low < d.difference < d.high
    # Concordant items change nothing but n: the same discordant split, more agreement.
    more = stats.paired_difference(*_flags(160, 10, 5, 25))
    assert more.difference == pytest.approx(d.difference)
    assert more.p_value == d.p_value


def test_mcnemar_exact_matches_the_binomial_tail() -> None:
    # 10 vs 5 discordant: 2 · P(X ≤ 5), X ~ Bin(15, ½) = 2 · 4944 / 32768.
    assert stats.mcnemar_exact_p(10, 5) == pytest.approx(2 * 4944 / 32768)
    assert stats.mcnemar_exact_p(5, 10) == stats.mcnemar_exact_p(10, 5)
    assert stats.mcnemar_exact_p(0, 0) == 1.0
    assert stats.mcnemar_exact_p(7, 7) == 1.0
    assert stats.mcnemar_exact_p(0, 8) == pytest.approx(2 / 256)


def test_mde_follows_the_discordance() -> None:
    d = stats.paired_difference(*_flags(80, 10, 5, 105))
    assert d.mde == pytest.approx(2.80158 * math.sqrt(15 / 200 / 200), rel=1e-4)
    same = stats.paired_difference(*_flags(90, 0, 0, 110))
    assert same.difference == 0.0 and same.p_value == 1.0
    assert math.isnan(same.mde)  # no discordant item: no variability measured, no MDE


def test_unequal_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        stats.paired_counts([True], [True, False])


@pytest.mark.parametrize(
    ("p_a", "p_b", "agree"),
    [(0.40, 0.40, 0.8), (0.40, 0.33, 0.7), (0.15, 0.12, 0.75)],
)
def test_newcombe_paired_interval_covers_at_n_200(p_a: float, p_b: float, agree: float) -> None:
    """Coverage of the 95 % interval over 2,000 simulated runs of 200 paired items.

    Items are right under A with p_a; under B a share ``agree`` copies A's flag and the
    rest are drawn afresh with the probability that keeps B's marginal at p_b. Newcombe's
    method is known to sit near or a little above nominal; we ask for 0.93–0.99.
    """
    rng = np.random.default_rng(11)
    n, runs, covered = 200, 2000, 0
    fresh = (p_b - agree * p_a) / (1 - agree)
    assert 0.0 <= fresh <= 1.0
    truth = p_a - p_b
    for _ in range(runs):
        a = rng.random(n) < p_a
        copy = rng.random(n) < agree
        b = np.where(copy, a, rng.random(n) < fresh)
        t = stats.paired_counts(a.tolist(), b.tolist())
        ci = stats.paired_interval(t, z=stats.Z95)
        covered += ci.low <= truth <= ci.high
    assert 0.93 <= covered / runs <= 0.99
