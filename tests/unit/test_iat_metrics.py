"""SC and Newcombe intervals against hand-computed and published values."""

from __future__ import annotations

import math

import pytest

from dmt_bench.iat.metrics import (
    ScoreCounts,
    newcombe_difference,
    proportion,
    stereotypical_score,
)


def test_sc_counts_invalid_in_n() -> None:
    # 200 trials: 120 stereotypical, 40 other valid, 40 invalid, plus 3 transport errors
    score = stereotypical_score(
        ScoreCounts(n_stereotype=120, n_valid=160, n_invalid=40, n_errors=3)
    )
    assert score.n == 200
    assert score.sc.value == pytest.approx(0.60)
    assert score.sc_valid.value == pytest.approx(0.75)
    assert score.invalid_rate.value == pytest.approx(0.20)
    assert score.sc.ci.low < 0.60 < score.sc.ci.high


def test_sc_empty_is_defined() -> None:
    score = stereotypical_score(ScoreCounts())
    assert score.n == 0
    assert not score.sc.defined and score.model_dump(mode="json")["sc"]["value"] is None
    assert math.isnan(score.sc.ci.low) and math.isnan(score.sc.ci.high)
    only_invalid = stereotypical_score(ScoreCounts(n_invalid=5))
    assert only_invalid.sc.value == 0.0
    assert not only_invalid.sc_valid.defined
    assert only_invalid.model_dump(mode="json")["sc_valid"]["value"] is None
    assert only_invalid.invalid_rate.value == 1.0


def test_sc_rejects_inconsistent_counts() -> None:
    with pytest.raises(ValueError):
        stereotypical_score(ScoreCounts(n_stereotype=3, n_valid=2))


def test_newcombe_published_example() -> None:
    # Newcombe (1998), Stat Med 17:873, example (a): 56/70 - 48/80, method 10: 0.0524 to 0.3339
    diff = newcombe_difference(before=proportion(48, 80), after=proportion(56, 70))
    assert diff.value == pytest.approx(0.2)
    assert diff.ci is not None
    assert diff.ci.low == pytest.approx(0.0524, abs=1e-4)
    assert diff.ci.high == pytest.approx(0.3339, abs=1e-4)


def test_newcombe_empty_side() -> None:
    diff = newcombe_difference(proportion(0, 0), proportion(3, 10))
    assert not diff.defined and math.isnan(diff.ci.low) and math.isnan(diff.ci.high)


def test_newcombe_identical_is_centred_on_zero() -> None:
    diff = newcombe_difference(proportion(30, 100), proportion(30, 100))
    assert diff.value == 0.0
    assert diff.ci is not None
    assert math.isclose(diff.ci.low, -diff.ci.high)
