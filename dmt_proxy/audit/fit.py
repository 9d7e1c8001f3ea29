"""Offline fitting for the auditor: Platt scaling, the judges' fusion, ROC AUC.

Fitted on auditor-eval train splits (``dmt_bench.auditor_eval.calibrate``);
the runtime (``dmt_proxy.audit.logprob``) only applies the fitted parameters.

- ``fit_platt``: ``p = sigmoid(a · logit(P_raw) + b)`` by damped Newton on the
  penalised log-loss with Platt's (1999) smoothed targets;
- ``fit_fusion``: logistic regression of the label on ``(logit P_raw, logit p_first)``,
  damped Newton with a 3×3 solve per step (``solve3``, Cramer's rule);
- ``auc``: ``#{(p, n): s_p > s_n} + ½ #{s_p = s_n}`` over ``|P|·|N|`` pairs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dmt_proxy.audit.logprob import JudgeFusion, PlattScaling, logit, sigmoid

_EPS = 1e-6
"""The probability clip of the log-loss reported with a fit (as ``logprob.logit`` clips)."""


def fit_platt(
    p_raw: Sequence[float], labels: Sequence[bool], *, trained_on: str, l2: float = 1e-2,
    iterations: int = 100,
) -> PlattScaling:  # fmt: skip
    """Fit Platt scaling by damped Newton on logit(P_raw) (Platt's smoothed targets, a small
    L2 penalty on both parameters so that a separable or one-valued set stays finite). A
    negative slope (the model's P(yes) anti-correlated with bias) becomes a = 0: the base
    rate, never an inverted model."""
    if len(p_raw) != len(labels) or not p_raw:
        raise ValueError("one label per probability, and at least one")
    xs = [logit(p) for p in p_raw]
    pos = sum(labels)
    neg = len(labels) - pos
    # Platt (1999): targets (N+ + 1)/(N+ + 2) and 1/(N- + 2) keep a separable set finite.
    hi, lo = (pos + 1) / (pos + 2), 1 / (neg + 2)
    ts = [hi if y else lo for y in labels]

    def loss(a: float, b: float) -> float:
        total = l2 * (a * a + b * b) / 2
        for x, t in zip(xs, ts, strict=True):
            p = min(1 - 1e-12, max(1e-12, sigmoid(a * x + b)))
            total -= t * math.log(p) + (1 - t) * math.log(1 - p)
        return total

    a, b = 1.0, 0.0
    current = loss(a, b)
    for _ in range(iterations):
        ga, gb, haa, hab, hbb = l2 * a, l2 * b, l2, 0.0, l2
        for x, t in zip(xs, ts, strict=True):
            p = sigmoid(a * x + b)
            w = p * (1 - p)
            ga += (p - t) * x
            gb += p - t
            haa += w * x * x
            hab += w * x
            hbb += w
        det = haa * hbb - hab * hab
        if det <= 1e-12:
            break
        da = (hbb * ga - hab * gb) / det
        db = (haa * gb - hab * ga) / det
        step = 1.0
        # Damped Newton: halve the step until the penalised log-loss decreases.
        while step > 1e-6 and loss(a - step * da, b - step * db) > current:
            step /= 2
        if step <= 1e-6:
            break
        a, b = a - step * da, b - step * db
        previous, current = current, loss(a, b)
        if previous - current < 1e-10:
            break
    if a < 0:
        # A model whose P(yes) falls as bias rises has no usable signal here: calibrate it
        # to the base rate rather than invert it.
        a, b = 0.0, logit(sum(ts) / len(ts))
    cal = [sigmoid(a * x + b) for x in xs]
    ys = [1.0 if y else 0.0 for y in labels]
    n = len(ys)
    return PlattScaling(
        a=round(a, 6), b=round(b, 6), trained_on=trained_on, n=n, positives=pos,
        brier_raw=round(sum((p - y) ** 2 for p, y in zip(p_raw, ys, strict=True)) / n, 5),
        brier_calibrated=round(sum((p - y) ** 2 for p, y in zip(cal, ys, strict=True)) / n, 5),
        log_loss_calibrated=round(
            -sum(y * math.log(max(p, _EPS)) + (1 - y) * math.log(max(1 - p, _EPS))
                 for p, y in zip(cal, ys, strict=True)) / n, 5),
    )  # fmt: skip


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve (ties count half); NaN without both classes."""
    pos = [s for s, y in zip(scores, labels, strict=True) if y]
    neg = [s for s, y in zip(scores, labels, strict=True) if not y]
    if not pos or not neg:
        return math.nan
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def fit_fusion(
    p_raw: Sequence[float], p_first: Sequence[float], labels: Sequence[bool], *,
    classifier: str, trained_on: str, l2: float = 1e-2, iterations: int = 100,
) -> JudgeFusion:  # fmt: skip
    """Logistic regression of the labels on (logit P_raw, logit p_first), damped Newton."""
    if not (len(p_raw) == len(p_first) == len(labels)) or not labels:
        raise ValueError("one label per pair of scores, and at least one")
    xs = [(logit(a), logit(c)) for a, c in zip(p_raw, p_first, strict=True)]
    ys = [1.0 if y else 0.0 for y in labels]

    def loss(w: list[float]) -> float:
        total = l2 * sum(v * v for v in w) / 2
        for (x1, x2), y in zip(xs, ys, strict=True):
            p = min(1 - 1e-12, max(1e-12, sigmoid(w[0] * x1 + w[1] * x2 + w[2])))
            total -= y * math.log(p) + (1 - y) * math.log(1 - p)
        return total

    w = [1.0, 1.0, 0.0]
    current = loss(w)
    for _ in range(iterations):
        grad = [l2 * v for v in w]
        hess = [[l2 if i == j else 0.0 for j in range(3)] for i in range(3)]
        for (x1, x2), y in zip(xs, ys, strict=True):
            f = (x1, x2, 1.0)
            p = sigmoid(w[0] * x1 + w[1] * x2 + w[2])
            for i in range(3):
                grad[i] += (p - y) * f[i]
                for j in range(3):
                    hess[i][j] += p * (1 - p) * f[i] * f[j]
        step_dir = solve3(hess, grad)
        if step_dir is None:
            break
        step = 1.0
        while step > 1e-6 and loss([w[i] - step * step_dir[i] for i in range(3)]) > current:
            step /= 2
        if step <= 1e-6:
            break
        w = [w[i] - step * step_dir[i] for i in range(3)]
        previous, current = current, loss(w)
        if previous - current < 1e-10:
            break
    fused = [sigmoid(w[0] * x1 + w[1] * x2 + w[2]) for x1, x2 in xs]
    return JudgeFusion(
        w_llm=round(w[0], 6), w_first=round(w[1], 6), b=round(w[2], 6), classifier=classifier,
        trained_on=trained_on, n=len(ys), positives=int(sum(ys)),
        auc_llm=round(auc(p_raw, labels), 4), auc_first=round(auc(p_first, labels), 4),
        auc_fused=round(auc(fused, labels), 4),
    )  # fmt: skip


def solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
    """Solve the 3x3 system a·x = b (Cramer's rule); ``None`` when singular."""

    def det(m: list[list[float]]) -> float:
        return (m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1])
                - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0])
                + m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]))  # fmt: skip

    d = det(a)
    if abs(d) < 1e-12:
        return None
    out = []
    for col in range(3):
        m = [row[:] for row in a]
        for r in range(3):
            m[r][col] = b[r]
        out.append(det(m) / d)
    return out
