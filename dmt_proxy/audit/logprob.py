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
verdict's auditor label (``…@prompt/uncalibrated``). This module only applies a
fitted calibration or fusion; fitting them is offline work (``dmt_proxy.audit.fit``).
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

CALIBRATION_VERSION = "calibration_v5"
TOP_LOGPROBS = 20
YES_NO: dict[str, tuple[str, ...]] = {"yes": ("yes",), "no": ("no",)}
DOMAIN_WORDS: dict[str, tuple[str, ...]] = {t: (t,) for t in BIAS_TYPES}
KIND_WORDS: dict[str, tuple[str, ...]] = {
    "judging": ("judging",),
    "self": ("self",),
    "rejecting": ("rejecting",),
    "neutral": ("neutral",),
}
"""The answers of the ``[kind question]`` (auditor_v4): how the user's words treat the group."""
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


def domain_distribution(
    tokens: Sequence[TokenLogprob], classes: Mapping[str, Sequence[str]] = DOMAIN_WORDS
) -> dict[str, float]:
    """A normalised distribution over ``classes`` (default: the bias types) at the answer
    position ({} if none)."""
    position = answer_position(tokens)
    if position is None:
        return {}
    mass = class_mass(alternatives_at(position), classes)
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
    w_kind: float = 0.0
    """auditor_v4 (the ``+kind`` entry): weight of logit P(judging), the kind question's
    probability that the user judges the group (rather than describing themselves,
    rejecting a view, or stating facts)."""

    def apply(self, p_raw: float, p_first: float, p_judging: float | None = None) -> float:
        """The combined probability of bias (``p_judging`` only for a ``+kind`` entry)."""
        x = self.w_llm * logit(p_raw) + self.w_first * logit(p_first) + self.b
        if p_judging is not None and self.w_kind:
            x += self.w_kind * logit(p_judging)
        return sigmoid(x)


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

    def fusion_for(
        self, model_key: str, classifier: str, *, kind: bool = False
    ) -> JudgeFusion | None:
        """The fusion of ``model@prompt`` with first-stage ``classifier``, if fitted
        (``kind``: the entry that also weighs the kind question's answer)."""
        return self.fusion.get(f"{model_key}+{classifier}" + ("+kind" if kind else ""))


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


def grammar(words: Sequence[str]) -> str:
    """A GBNF grammar (llama.cpp) accepting exactly one of ``words``."""
    return "root ::= " + " | ".join(json.dumps(w) for w in words)
