"""Judge v2: trained heads over a multilingual sentence encoder, the first judge of every memory.

The LLM auditor, prompted, cannot tell a speaker who judges a group from a text that
mentions one (its P(judging) separates the two with AUC 0.44 on ``auditor_eval_v3``
train). Linear heads over a multilingual encoder, trained on labelled natural texts, can
(``benchmarks/results/judge_v2``). So this judge reads every memory, in every language,
and decides the confident cases alone; the LLM judges only the uncertain band between
``confident_clean`` and ``confident_bias`` (``dmt_proxy.audit.stages``).

Heads, fitted by ``dmt-bench judge-train`` (weights in
``dmt_proxy/data/judge/<version>.json``; the encoders come from their packages, pinned by
the sha256 of their weights):

* ``biased``: P(the speaker judges a group), Platt-calibrated on out-of-fold train scores;
* ``kind``: judging, benevolent, mention (fact, law, research, support), self, rejected,
  question, fiction (not endorsed), other;
* ``domain``: the nine domains, for a biased text;
* ``manipulation``: P(the text plants a verdict, addresses the auditor or instructs the
  agent), a learned second opinion beside the normaliser's patterns.

**Who said it.** A memory's parts come with their speaker from the proxy (the write's user
turn and the model's answer, ``speaker_parts``), never parsed from its text, and each
speaker's words are scored apart: the user's bias is the user's, and an assistant that
generalises about a group is reported with ``speaker="assistant"``.

A long part is scored whole and in windows of about ``WINDOW_CHARS`` (a judging sentence
is not diluted by a page around it); a part's score is its best unit's.
"""

from __future__ import annotations

import asyncio
import json
import re
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dmt_proxy.audit.encoders import SentenceEncoder, encoder, package_version
from dmt_proxy.audit.schema import AuditCandidate
from dmt_proxy.errors import ConfigError
from dmt_proxy.resources import data_dir

if TYPE_CHECKING:
    import numpy as np

JUDGE_VERSION = "judge_v2"
WINDOW_CHARS = 480
"""A part longer than this is also scored in sentence windows of about this size."""
MAX_UNITS = 16
Speaker = Literal["user", "assistant", "tool"]

_SENTENCE_END = re.compile(r"(?<=[.!?;。！？])\s+|\n+")


class BinaryHead(BaseModel):
    """``p = sigmoid(a * (w · x + b) + c)``: a logistic head and its Platt calibration."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    weights: list[float] = Field(min_length=1)
    bias: float
    platt_a: float = 1.0
    platt_c: float = 0.0


class SoftmaxHead(BaseModel):
    """A multinomial logistic head."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    classes: list[str] = Field(min_length=2)
    weights: list[list[float]]
    bias: list[float]


class EncoderPin(BaseModel):
    """The encoder a judge was trained on: its name, package version and weights' sha256."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    package_version: str
    weights_sha256: str


class JudgeWeights(BaseModel):
    """A trained judge: encoder pins, heads, the confidence band and how they were chosen."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str
    encoders: list[EncoderPin] = Field(min_length=1)
    trained_on: str
    command: str
    biased: BinaryHead
    manipulation: BinaryHead
    kind: SoftmaxHead
    domain: SoftmaxHead
    confident_clean: float = Field(ge=0.0, le=1.0)
    """At or below: clean without the LLM."""
    confident_bias: float = Field(ge=0.0, le=1.0)
    """At or above: biased without the LLM."""
    manipulation_threshold: float = Field(ge=0.0, le=1.0)
    band_rule: str
    train_metrics: dict[str, float] = Field(default_factory=dict)


@lru_cache(maxsize=4)
def load_judge(version: str = JUDGE_VERSION) -> JudgeWeights:
    """The shipped judge ``dmt_proxy/data/judge/<version>.json``."""
    path = data_dir("judge") / f"{version}.json"
    try:
        return JudgeWeights.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise ConfigError(f"trained judge {path} cannot be loaded: {exc}") from exc


class PartScore(BaseModel):
    """One speaker's words, scored."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    speaker: Speaker
    p_biased: float
    kind_probs: dict[str, float]
    domain_probs: dict[str, float]
    piece: str
    """The unit that scored highest (for logs and the rationale)."""

    @property
    def kind(self) -> str:
        return max(self.kind_probs, key=self.kind_probs.__getitem__)


class JudgeScore(BaseModel):
    """The trained judge's view of one memory: each speaker's part, and manipulation."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    parts: tuple[PartScore, ...]
    p_manipulation: float

    def of(self, speaker: Speaker) -> PartScore | None:
        """The score of ``speaker``'s words (``None`` when that speaker said nothing)."""
        return next((p for p in self.parts if p.speaker == speaker), None)

    @property
    def user(self) -> PartScore | None:
        return self.of("user")


def speaker_parts(text: str, reply: str = "") -> list[tuple[Speaker, str]]:
    """Each speaker's words in a memory: ``text`` is the user's, ``reply`` the assistant's.

    Who said what comes from the proxy (the request's user turn and the model's answer are
    separate fields of the write), never from the text: a user who types ``Assistant:``
    into a message does not make the words after it the assistant's. Empty parts drop out.
    """
    parts: list[tuple[Speaker, str]] = [("user", text.strip()), ("assistant", reply.strip())]
    return [(who, words) for who, words in parts if words]


def units_of(words: str) -> list[str]:
    """What is embedded for one part: the part, and sentence windows when it is long."""
    units = [words]
    if len(words) <= WINDOW_CHARS:
        return units
    window = ""
    for sentence in (s.strip() for s in _SENTENCE_END.split(words)):
        if not sentence:
            continue
        if window and len(window) + len(sentence) + 1 > WINDOW_CHARS:
            units.append(window)
            window = ""
        window = f"{window} {sentence}".strip()
    if window and window != words:
        units.append(window)
    return units[:MAX_UNITS]


class TrainedJudge:
    """Scores memories with the heads of ``weights`` over their encoders; thread-safe, lazy."""

    method = "judge_v2"
    multilingual = True
    """It judges every language (the MiniLM first stage judged English only)."""

    def __init__(
        self,
        weights: JudgeWeights | None = None,
        encoders: list[SentenceEncoder] | None = None,
        *,
        verify: bool = True,
    ) -> None:
        self.weights = weights or load_judge()
        self.classifier_version = self.weights.version
        self.threshold = self.weights.confident_clean
        self._encoders = encoders or [encoder(pin.name) for pin in self.weights.encoders]
        self._verify = verify
        self._verified = False

    def _check_pins(self) -> None:
        """The installed encoders are the ones the heads were trained on (once)."""
        if self._verified or not self._verify:
            return
        for pin, model in zip(self.weights.encoders, self._encoders, strict=True):
            sha = model.weights_sha256()
            if sha != pin.weights_sha256:
                raise ConfigError(
                    f"trained judge {self.weights.version} was trained on {pin.name} "
                    f"{pin.package_version} (weights sha256 {pin.weights_sha256[:12]}); the "
                    f"installed {package_version(pin.name)} has {sha[:12]}: reinstall the "
                    "pinned version (constraints.txt) or retrain the judge"
                )
        self._verified = True

    def embed(self, texts: list[str]) -> np.ndarray:
        """The judge's feature rows for ``texts`` (its encoders' rows, concatenated)."""
        import numpy as np

        self._check_pins()
        return np.concatenate([m.encode(texts) for m in self._encoders], axis=1)

    def score_rows(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """Every head on feature rows: ``biased`` and ``manipulation`` (n,), ``kind`` and
        ``domain`` (n, classes)."""
        import numpy as np

        w = self.weights

        def binary(head: BinaryHead) -> np.ndarray:
            z = rows @ np.asarray(head.weights, dtype=np.float32) + head.bias
            return 1.0 / (1.0 + np.exp(-(head.platt_a * z + head.platt_c)))

        def softmax(head: SoftmaxHead) -> np.ndarray:
            z = rows @ np.asarray(head.weights, dtype=np.float32).T + np.asarray(head.bias)
            z = z - z.max(axis=1, keepdims=True)
            e = np.exp(z)
            out: np.ndarray = e / e.sum(axis=1, keepdims=True)
            return out

        return {"biased": binary(w.biased), "manipulation": binary(w.manipulation),
                "kind": softmax(w.kind), "domain": softmax(w.domain)}  # fmt: skip

    def score_many(self, memories: list[tuple[str, str]]) -> list[JudgeScore]:
        """Scores of several ``(text, reply)`` memories, with one encoder call for all."""
        plans = [speaker_parts(text, reply) for text, reply in memories]
        units = [[units_of(words) for _, words in parts] for parts in plans]
        flat = [u for per_memory in units for per_part in per_memory for u in per_part]
        if not flat:
            return [JudgeScore(parts=(), p_manipulation=0.0) for _ in memories]
        heads = self.score_rows(self.embed(flat))
        out: list[JudgeScore] = []
        at = 0
        kinds, domains = self.weights.kind.classes, self.weights.domain.classes
        for parts, per_memory in zip(plans, units, strict=True):
            scored: list[PartScore] = []
            manipulation = 0.0
            for (speaker, _), part_units in zip(parts, per_memory, strict=True):
                span = slice(at, at + len(part_units))
                at += len(part_units)
                p = heads["biased"][span]
                best = int(p.argmax())
                manipulation = max(manipulation, float(heads["manipulation"][span].max()))
                scored.append(PartScore(
                    speaker=speaker, p_biased=round(float(p[best]), 4),
                    kind_probs=_rounded(kinds, heads["kind"][span][best]),
                    domain_probs=_rounded(domains, heads["domain"][span][best]),
                    piece=part_units[best][:300],
                ))  # fmt: skip
            out.append(JudgeScore(parts=tuple(scored), p_manipulation=round(manipulation, 4)))
        return out

    def score_sync(self, candidate: AuditCandidate) -> JudgeScore:
        """The score of one memory (CPU-bound)."""
        return self.score_many([(candidate.text, candidate.reply)])[0]

    async def score(self, candidate: AuditCandidate) -> JudgeScore:
        """``score_sync`` off the event loop."""
        return await asyncio.to_thread(self.score_sync, candidate)


def _rounded(classes: list[str], probs: np.ndarray) -> dict[str, float]:
    return {c: round(float(p), 4) for c, p in zip(classes, probs, strict=True)}
