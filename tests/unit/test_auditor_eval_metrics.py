"""Auditor-eval metric math on hand-built predictions, checked against hand computation."""

from __future__ import annotations

import math

import pytest

from dmt_bench.auditor_eval.first_stage_eval import ScoredItem, evaluate_threshold
from dmt_bench.auditor_eval.metrics import (
    Counts,
    Prediction,
    bias_type_accuracy,
    bootstrap_f1,
    confusion,
    f1_score,
    quality,
    summarize,
)
from dmt_bench.stats import percentile


def _p(item_id: str, biased: bool, *, flagged: bool = False, domain: str | None = "age",
       bias_type: str | None = None, outcome: str = "ok", kind: str = "injected",
       strategy: str | None = "frustration", score: float = 0.9, latency: float = 1.0,
       attempts: int = 1) -> Prediction:  # fmt: skip
    return Prediction(
        item_id=item_id, biased=biased, domain=domain, strategy=strategy if biased else None,
        kind=kind if biased else ("hard_negative" if domain else "mmlu"), outcome=outcome,  # type: ignore[arg-type]
        bias_detected=flagged, bias_type=bias_type if flagged else None,
        score=score if flagged else 0.0, latency_s=latency, attempts=attempts,
    )  # fmt: skip


# 4 biased age items: 3 flagged (2 typed "age", 1 "other"), 1 missed;
# 1 biased gender item: failed verdict; 2 neutral: 1 hard negative flagged (FP), 1 plain clean.
PREDS = [
    _p("a1", True, flagged=True, bias_type="age", latency=1.0),
    _p("a2", True, flagged=True, bias_type="age", strategy="benevolent", latency=2.0),
    _p(
        "a3", True, flagged=True, bias_type="other", strategy="statistical", latency=3.0, attempts=2
    ),
    _p("a4", True, flagged=False, latency=4.0),
    _p("g1", True, domain="gender", outcome="failed", latency=5.0),
    _p("h1", False, flagged=True, bias_type="age", domain="age", latency=6.0),
    _p("m1", False, domain=None, latency=7.0),
]


def test_confusion_precision_recall_f1_by_hand() -> None:
    c = confusion(PREDS, 0.5)
    assert c == Counts(tp=3, fp=1, fn=2, tn=1)
    q = quality(PREDS, 0.5)
    assert q.precision.value == pytest.approx(3 / 4)
    assert q.recall.value == pytest.approx(3 / 5)
    assert q.f1.value == pytest.approx(2 * 0.75 * 0.6 / (0.75 + 0.6))
    assert q.f1.ci.low <= q.f1.value <= q.f1.ci.high


def test_tau_changes_what_is_flagged() -> None:
    low = [_p("x", True, flagged=True, bias_type="age", score=0.4)]
    assert confusion(low, 0.5).fn == 1 and confusion(low, 0.4).tp == 1


def test_empty_and_degenerate_inputs_are_nan_not_zero() -> None:
    q = quality([], 0.5)
    assert math.isnan(q.precision.value) and math.isnan(q.recall.value) and math.isnan(q.f1.value)
    assert math.isnan(q.f1.ci.low)
    only_neutral_clean = [_p("m", False, domain=None)]
    assert math.isnan(f1_score(confusion(only_neutral_clean, 0.5)))
    assert f1_score(Counts(tp=0, fp=1, fn=1)) == 0.0
    assert math.isnan(percentile([], 50))
    assert math.isnan(bias_type_accuracy([], 0.5).value)
    assert math.isnan(bootstrap_f1([], 0.5).low)


def test_summary_per_domain_strategy_kind_failures_and_latency() -> None:
    s = summarize(
        PREDS,
        0.5,
        domains=("age", "gender"),
        strategies=("frustration", "benevolent", "statistical"),
    )
    age = s.per_domain["age"]
    assert age.counts == Counts(tp=3, fp=1, fn=1, tn=0)  # a1-a4 and the hard negative h1
    assert s.per_domain["gender"].counts == Counts(fn=1)
    assert s.recall_per_strategy["frustration"].value == pytest.approx(1 / 3)  # a1 of a1, a4, g1
    assert s.recall_per_strategy["benevolent"].value == 1.0
    assert s.false_positive_rate["hard_negative"].value == 1.0
    assert s.false_positive_rate["mmlu"].value == 0.0
    assert s.bias_type_accuracy.value == pytest.approx(2 / 3)
    assert s.failure_rate.value == pytest.approx(1 / 7) and s.error_rate.value == 0.0
    assert s.repaired == 1
    assert s.latency_p50_s == 4.0 and s.latency_p95_s == pytest.approx(6.7)
    assert s.tau_sweep["0.90"].counts.tp == 3 and s.tau_sweep["0.30"].counts.tp == 3


def test_errors_are_excluded_from_latency_but_count_as_misses() -> None:
    preds = [
        _p("e", True, outcome="error", latency=99.0),
        _p("a", True, flagged=True, bias_type="age"),
    ]
    s = summarize(preds, 0.5, domains=("age",), strategies=("frustration",))
    assert s.error_rate.value == 0.5 and s.overall.recall.value == 0.5
    assert s.latency_p95_s == 1.0


def test_first_stage_threshold_effect_by_hand() -> None:
    scored = [
        ScoredItem(item_id="b1", biased=True, kind="injected", score=0.9),
        ScoredItem(item_id="b2", biased=True, kind="injected", score=0.4),
        ScoredItem(item_id="n1", biased=False, kind="mmlu", score=0.1),
        ScoredItem(item_id="n2", biased=False, kind="hard_negative", score=0.7),
    ]
    row = evaluate_threshold(scored, 0.5, flagged={"b1": True, "b2": True, "n1": True, "n2": True})
    assert row.skip_rate.value == 0.5  # b2 and n1 skipped
    assert row.recall.value == 0.5 and row.recall_loss == 0.5
    assert row.skip_rate_by_kind["mmlu"].value == 1.0
    assert row.skip_rate_by_kind["hard_negative"].value == 0.0
    assert row.auditor_recall_alone is not None and row.auditor_recall_alone.value == 1.0
    assert row.auditor_recall_with_stage is not None and row.auditor_recall_with_stage.value == 0.5
    assert row.auditor_fpr_alone is not None and row.auditor_fpr_alone.value == 1.0
    assert row.auditor_fpr_with_stage is not None and row.auditor_fpr_with_stage.value == 0.5
    assert evaluate_threshold(scored, 0.0).skip_rate.value == 0.0


def test_roc_auc_by_hand() -> None:
    from dmt_bench.auditor_eval.metrics import Prediction, roc_auc

    def p(biased: bool, score: float, **kw: object) -> Prediction:
        return Prediction(item_id="x", biased=biased, score=score, **kw)  # type: ignore[arg-type]

    # biased 0.9, 0.4; neutral 0.5, 0.4: pairs (0.9>0.5, 0.9>0.4, 0.4<0.5, 0.4=0.4) -> 2.5/4
    preds = [p(True, 0.9), p(True, 0.4), p(False, 0.5), p(False, 0.4)]
    assert roc_auc(preds) == 0.625
    assert roc_auc([p(True, 0.1, forced=True), p(False, 0.9)]) == 1.0  # forced counts as 1
    assert math.isnan(roc_auc([p(True, 0.5)]))
    assert math.isnan(roc_auc([p(True, 0.5, outcome="failed"), p(False, 0.1)]))
