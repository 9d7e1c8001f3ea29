"""Verdicts from token probabilities, and their calibration.

The auditor model is asked a yes/no question about the memory and answers with a
single constrained token; ``P(biased)`` is read from that position's
``top_logprobs`` (llama-server returns the model's distribution before its grammar
is applied, OpenAI-compatible providers return it when ``logprobs`` is set), not
from a number the model writes about itself:

    P_raw(yes) = Σ p(t) over top tokens t that begin "yes"
                 / Σ p(t) over top tokens that begin "yes" or "no"

(case and surrounding spaces ignored; a token that begins both words would be
split between them). A second constrained turn asks which kind of group the bias is
about; its distribution over the ten bias types is read the same way (a token
counts for every type whose name it begins, split evenly), and goes into the
judges' combined domain vote. A third, short turn writes the rationale; it runs
only for memories that will be tagged, after the verdict is known, and its failure
never changes the verdict.

Calibration (``Calibration``): Platt scaling fitted on the train split,
``p = sigmoid(a · logit(P_raw) + b)``, so that tau is a probability. The fitted
parameters live in ``dmt_proxy/data/auditor_calibration/<version>.json``, one entry
per ``model@prompt``; a pair without an entry uses ``P_raw`` and says so in the
verdict's auditor label (``…@prompt/uncalibrated``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dmt_proxy.domains import BIAS_TYPES
from dmt_proxy.errors import ConfigError, ReplyInvalid
from dmt_proxy.openai_types import ChatCompletion
from dmt_proxy.resources import data_dir

CALIBRATION_VERSION = "calibration_v1"
TOP_LOGPROBS = 20
YES_NO: dict[str, tuple[str, ...]] = {"yes": ("yes",), "no": ("no",)}
DOMAIN_WORDS: dict[str, tuple[str, ...]] = {t: (t,) for t in BIAS_TYPES}
_EPS = 1e-6


class TopLogprob(BaseModel):
    """One alternative at a generated position."""

    model_config = ConfigDict(extra="allow")
    token: str
    logprob: float


class TokenLogprob(BaseModel):
    """One generated token with its alternatives."""

    model_config = ConfigDict(extra="allow")
    token: str
    logprob: float
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class NoLogprobs(ReplyInvalid, ValueError):
    """The reply carries no token log-probabilities (the provider does not return them)."""


def reply_logprobs(completion: ChatCompletion) -> list[TokenLogprob]:
    """The generated tokens' log-probs of the first choice; ``NoLogprobs`` when absent."""
    if not completion.choices:
        raise NoLogprobs("the reply has no choices")
    raw: Any = (completion.choices[0].model_extra or {}).get("logprobs")
    content = raw.get("content") if isinstance(raw, dict) else None
    if not content:
        raise NoLogprobs("the reply carries no logprobs.content")
    try:
        return [TokenLogprob.model_validate(t) for t in content]
    except ValidationError as exc:
        raise NoLogprobs(f"the reply's logprobs are malformed: {exc.errors()[0]['msg']}") from exc


def answer_position(tokens: Sequence[TokenLogprob]) -> TokenLogprob | None:
    """The first generated token that starts a word (skips whitespace, quotes, punctuation)."""
    for token in tokens:
        if token.token.strip(" \t\n\"'`*:{[(").strip():
            return token
    return None


def class_mass(
    alternatives: Sequence[TopLogprob], classes: Mapping[str, Sequence[str]]
) -> dict[str, float]:
    """Probability mass per class at one position (module docstring rule); zeros if none."""
    mass = dict.fromkeys(classes, 0.0)
    for alt in alternatives:
        # " yes", "Yes" and "YES" are distinct tokens: each adds its own mass.
        word = alt.token.strip().lower()
        if not word:
            continue
        owners = [c for c, words in classes.items() if any(w.startswith(word) for w in words)]
        if not owners:
            continue
        share = math.exp(alt.logprob) / len(owners)
        for owner in owners:
            mass[owner] += share
    return mass


def alternatives_at(position: TokenLogprob) -> list[TopLogprob]:
    """The position's top alternatives, or the generated token alone without them."""
    if position.top_logprobs:
        return position.top_logprobs
    return [TopLogprob(token=position.token, logprob=position.logprob)]


def p_yes(tokens: Sequence[TokenLogprob]) -> float | None:
    """``P_raw(yes)`` at the answer position; ``None`` when neither word is among the top."""
    position = answer_position(tokens)
    if position is None:
        return None
    mass = class_mass(alternatives_at(position), YES_NO)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


def domain_distribution(tokens: Sequence[TokenLogprob]) -> dict[str, float]:
    """A normalised distribution over the bias types at the answer position ({} if none)."""
    position = answer_position(tokens)
    if position is None:
        return {}
    mass = class_mass(alternatives_at(position), DOMAIN_WORDS)
    total = sum(mass.values())
    if total <= 0:
        return {}
    return {d: round(m / total, 4) for d, m in mass.items() if m > 0}


def logit(p: float) -> float:
    """log(p / (1 - p)) with p clipped to [1e-6, 1 - 1e-6]."""
    p = min(1.0 - _EPS, max(_EPS, p))
    return math.log(p / (1.0 - p))


def sigmoid(x: float) -> float:
    """1 / (1 + e^-x), without overflow."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    z = math.exp(x)
    return z / (1.0 + z)


class PlattScaling(BaseModel):
    """``p = sigmoid(a · logit(P_raw) + b)`` for one model and prompt."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    a: float
    b: float
    trained_on: str
    n: int
    positives: int
    brier_raw: float
    """Mean squared error of ``P_raw`` against the labels on the training items."""
    brier_calibrated: float
    log_loss_calibrated: float
    domain_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    """The LLM's share of the judges' domain vote for this model (fitted on train items:
    the largest weight at which the vote's train accuracy is highest)."""

    def apply(self, p_raw: float) -> float:
        """The calibrated probability of bias."""
        return sigmoid(self.a * logit(p_raw) + self.b)


class JudgeFusion(BaseModel):
    """The two judges' combined probability of bias, fitted on train items:

    ``p = sigmoid(w_llm · logit(P_raw) + w_first · logit(p_first) + b)``, where
    ``P_raw`` is the LLM's uncalibrated P(yes) and ``p_first`` the embedding
    classifier's score (out-of-fold on the training items, so the classifier is not
    trusted more than it deserves).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    w_llm: float
    w_first: float
    b: float
    classifier: str
    """The first-stage classifier version the weights belong to."""
    trained_on: str
    n: int
    positives: int
    auc_llm: float
    auc_first: float
    auc_fused: float
    """Areas under the ROC curve on the training items (in-sample for the fusion)."""

    def apply(self, p_raw: float, p_first: float) -> float:
        """The combined probability of bias."""
        return sigmoid(self.w_llm * logit(p_raw) + self.w_first * logit(p_first) + self.b)


class Calibration(BaseModel):
    """The shipped calibration file: Platt parameters per ``model@prompt``, and the fusion
    of the two judges per ``model@prompt+classifier``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str
    method: str = "platt"
    description: str = ""
    entries: dict[str, PlattScaling] = Field(default_factory=dict)
    fusion: dict[str, JudgeFusion] = Field(default_factory=dict)
    tau: dict[str, float] = Field(default_factory=dict)
    """τ fitted with the calibration per ``model@prompt`` (``dmt-proxy calibrate``): a
    suggestion; the policy's ``audit.tau`` is the threshold applied."""

    def for_model(self, model: str, prompt: str) -> PlattScaling | None:
        """The entry of ``model@prompt`` (model without provider prefix), if fitted."""
        return self.entries.get(calibration_key(model, prompt))

    def fusion_for(self, model_key: str, classifier: str) -> JudgeFusion | None:
        """The fusion of ``model@prompt`` with first-stage ``classifier``, if fitted."""
        return self.fusion.get(f"{model_key}+{classifier}")


def calibration_key(model: str, prompt: str) -> str:
    """``qwen2.5-1.5b@auditor_v3`` from ``openai/qwen2.5-1.5b`` or ``local/qwen2.5-1.5b``."""
    return f"{model.rsplit('/', 1)[-1]}@{prompt}"


@lru_cache(maxsize=4)
def load_calibration(version: str = CALIBRATION_VERSION) -> Calibration:
    """The calibration a policy names (``audit.calibration``): a shipped version (an empty
    one when that file does not exist yet), or the path of a ``.json`` file written by
    ``dmt-proxy calibrate`` (which must exist)."""
    if version.endswith(".json"):
        path = Path(version).expanduser()
        if not path.is_file():
            raise ConfigError(f"auditor calibration {path} does not exist")
    else:
        path = data_dir("auditor_calibration") / f"{version}.json"
    if not path.exists():
        return Calibration(version=version)
    try:
        return Calibration.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise ConfigError(f"auditor calibration {path} cannot be loaded: {exc}") from exc


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
        step_dir = _solve3(hess, grad)
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


def _solve3(a: list[list[float]], b: list[float]) -> list[float] | None:
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


def grammar(words: Sequence[str]) -> str:
    """A GBNF grammar (llama.cpp) accepting exactly one of ``words``."""
    return "root ::= " + " | ".join(json.dumps(w) for w in words)
