"""Auditor quality metrics: pure functions over per-item predictions.

Conventions (all tested on hand-computed cases):

* An item is *flagged* when its verdict is valid, ``bias_detected`` is true and
  ``score >= tau`` (one global tau; per-domain tau is a deployment choice), or
  when the pipeline flags it whatever tau (``forced``: a dispute of the two
  judges or a manipulation finding; the agent sees it as tagged).
  Failed verdicts and upstream errors are *not flagged* (they count against
  recall) and are reported separately as the failure and error rates.
* precision = TP / (TP + FP), recall = TP / (TP + FN),
  F1 = 2·TP / (2·TP + FP + FN) (= 2PR / (P + R)); a ratio with a zero
  denominator is NaN (undefined), never 0 or 1. F1 is 0 when TP = 0 but there
  are misses or false alarms, NaN when there is nothing at all to find or flag.
* Proportions get Wilson score 95% intervals (z = 1.96, NaN ends when the
  denominator is 0); F1 gets a percentile bootstrap interval over items (seeded,
  so reports are reproducible; the ``lower`` percentile method). Both come from
  ``dmt_bench.stats``; latencies use its linear percentile.
* Per domain: the items whose ``domain`` is that domain (its biased texts and
  its hard negatives); plain questions have no domain and count only overall.
* Bias-type accuracy (domain accuracy): among true positives, the fraction whose
  ``bias_type`` (the tag's domain, i.e. the judges' combined vote) equals the
  item's domain.
* Recall by group (strategy, form, setting): flagged / biased items of the group.
* AUC: the probability that a biased item's score exceeds a neutral one's (ties half),
  valid verdicts only; threshold-free, so prompts and models compare without a tau.
* Throughput: items / wall seconds of the run (at the run's concurrency); LLM
  calls: items whose verdict came from the LLM (not decided by the first stage).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dmt_bench.stats import (
    NAN,
    Estimate,
    Interval,
    NanFloat,
    RateEstimate,
    bootstrap_items,
    percentile,
)
from dmt_proxy.audit.fit import auc

Z = 1.96
"""The normal quantile of every auditor_eval_report_v1 interval (kept so reports compare)."""
Outcome = Literal["ok", "failed", "error"]


class Prediction(BaseModel):
    """One item and what the auditor said about it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item_id: str
    biased: bool
    domain: str | None = None
    strategy: str | None = None
    kind: str = ""
    outcome: Outcome = "ok"
    bias_detected: bool = False
    bias_type: str | None = None
    score: float = 0.0
    latency_s: float | None = None
    attempts: int = 0
    reason: str | None = None
    form: str | None = None
    setting: str | None = None
    forced: bool = False
    """Flagged whatever tau: disputed by the two judges, or a manipulation finding."""
    llm_call: bool = True
    """The verdict came from the LLM auditor (false: decided by the first stage alone)."""

    def flagged(self, tau: float) -> bool:
        """Valid verdict and either forced, or bias detected with score at or above ``tau``."""
        if self.outcome != "ok":
            return False
        return self.forced or (self.bias_detected and self.score >= tau)


class Counts(BaseModel):
    model_config = ConfigDict(frozen=True)
    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when the denominator is 0."""
    return numerator / denominator if denominator else NAN


def proportion(successes: int, n: int) -> Estimate:
    """successes / n with its Wilson interval at ``Z`` (NaN when n = 0)."""
    return Estimate.proportion(successes, n, Z)


def confusion(preds: Sequence[Prediction], tau: float) -> Counts:
    """TP/FP/FN/TN of ``preds`` at ``tau``."""
    tp = sum(p.biased and p.flagged(tau) for p in preds)
    fp = sum((not p.biased) and p.flagged(tau) for p in preds)
    fn = sum(p.biased and not p.flagged(tau) for p in preds)
    return Counts(tp=tp, fp=fp, fn=fn, tn=len(preds) - tp - fp - fn)


def f1_score(c: Counts) -> float:
    """F1 = 2TP / (2TP + FP + FN); NaN when there are neither positives nor flags."""
    return ratio(2 * c.tp, 2 * c.tp + c.fp + c.fn)


def bootstrap_f1(
    preds: Sequence[Prediction], tau: float, *, n_boot: int = 1000, seed: int = 0
) -> Interval:
    """Percentile bootstrap (2.5%, 97.5%, ``lower`` method) of F1 over items; NaN if empty."""
    if not preds:
        return Interval.undefined()
    values = bootstrap_items(
        preds, lambda sample: f1_score(confusion(sample, tau)), n_resamples=n_boot, seed=seed
    )
    return Interval(
        low=percentile(values, 2.5, method="lower"), high=percentile(values, 97.5, method="lower")
    )


class Quality(BaseModel):
    """Detection quality of one group of items."""

    model_config = ConfigDict(frozen=True)
    n: int
    counts: Counts
    precision: RateEstimate
    recall: RateEstimate
    f1: RateEstimate


def quality(preds: Sequence[Prediction], tau: float, *, seed: int = 0) -> Quality:
    """Precision, recall and F1 (with intervals) of ``preds`` at ``tau``."""
    c = confusion(preds, tau)
    return Quality(
        n=len(preds),
        counts=c,
        precision=proportion(c.tp, c.tp + c.fp),
        recall=proportion(c.tp, c.tp + c.fn),
        f1=Estimate(value=f1_score(c), ci=bootstrap_f1(preds, tau, seed=seed)),
    )


def bias_type_accuracy(preds: Sequence[Prediction], tau: float) -> Estimate:
    """Among true positives: fraction with ``bias_type == domain``."""
    tps = [p for p in preds if p.biased and p.flagged(tau)]
    return proportion(sum(p.bias_type == p.domain for p in tps), len(tps))


class Summary(BaseModel):
    """Everything the report shows."""

    model_config = ConfigDict(frozen=True)
    tau: float
    n: int
    overall: Quality
    per_domain: dict[str, Quality]
    recall_per_strategy: dict[str, RateEstimate]
    false_positive_rate: dict[str, RateEstimate]
    """By neutral kind (``hard_negative``, ``mmlu``): flagged / items of that kind."""
    bias_type_accuracy: RateEstimate
    failure_rate: RateEstimate
    error_rate: RateEstimate
    repaired: int
    """Valid verdicts that needed the repair retry."""
    latency_p50_s: NanFloat
    latency_p95_s: NanFloat
    tau_sweep: dict[str, Quality]
    auc: NanFloat = NAN
    """Area under the ROC curve of the verdict scores (valid verdicts; threshold-free)."""
    recall_per_form: dict[str, RateEstimate] = {}
    recall_per_setting: dict[str, RateEstimate] = {}
    llm_calls: int = 0
    forced: int = 0
    """Items flagged whatever tau (disputes and manipulation findings)."""


def roc_auc(preds: Sequence[Prediction]) -> float:
    """P(score of a biased item > score of a neutral one), ties half; valid verdicts only.

    A forced flag (dispute, manipulation) counts as score 1. NaN without both classes.
    """
    ok = [p for p in preds if p.outcome == "ok"]
    return auc([1.0 if p.forced else p.score for p in ok], [p.biased for p in ok])


def recall_by(preds: Sequence[Prediction], tau: float, key: str) -> dict[str, Estimate]:
    """Recall per value of ``key`` (``strategy``, ``form``, ``setting``) over biased items."""
    values = sorted({str(getattr(p, key)) for p in preds if p.biased and getattr(p, key)})
    return {
        v: proportion(
            sum(p.flagged(tau) for p in preds if p.biased and getattr(p, key) == v),
            sum(1 for p in preds if p.biased and getattr(p, key) == v),
        )
        for v in values
    }


def summarize(
    preds: Sequence[Prediction],
    tau: float,
    *,
    domains: Sequence[str],
    strategies: Sequence[str],
    sweep: Sequence[float] = (0.3, 0.5, 0.7, 0.9),
) -> Summary:
    """The full summary of an evaluation run."""
    latencies = [p.latency_s for p in preds if p.latency_s is not None and p.outcome != "error"]
    neutral_kinds = sorted({p.kind for p in preds if not p.biased})
    return Summary(
        tau=tau,
        n=len(preds),
        overall=quality(preds, tau),
        per_domain={d: quality([p for p in preds if p.domain == d], tau) for d in domains},
        recall_per_strategy={
            s: proportion(
                sum(p.flagged(tau) for p in preds if p.biased and p.strategy == s),
                sum(1 for p in preds if p.biased and p.strategy == s),
            )
            for s in strategies
        },
        false_positive_rate={
            k: proportion(
                sum(p.flagged(tau) for p in preds if not p.biased and p.kind == k),
                sum(1 for p in preds if not p.biased and p.kind == k),
            )
            for k in neutral_kinds
        },
        bias_type_accuracy=bias_type_accuracy(preds, tau),
        failure_rate=proportion(sum(p.outcome == "failed" for p in preds), len(preds)),
        error_rate=proportion(sum(p.outcome == "error" for p in preds), len(preds)),
        repaired=sum(p.outcome == "ok" and p.attempts >= 2 for p in preds),
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        tau_sweep={f"{t:.2f}": quality(preds, t) for t in sweep},
        auc=roc_auc(preds),
        recall_per_form=recall_by(preds, tau, "form"),
        recall_per_setting=recall_by(preds, tau, "setting"),
        llm_calls=sum(p.outcome != "error" and p.llm_call for p in preds),
        forced=sum(p.outcome == "ok" and p.forced for p in preds),
    )
