"""A cheap first stage before the LLM auditor (beyond the paper), on local embeddings.

Each memory is split into pieces (sentences, and pairs of neighbouring
sentences) and every piece is embedded with the local MiniLM model. Two scorers:

* ``classifier`` (default): a logistic regression over piece embeddings,
  trained on the train split of the labelled set (``first_stage_classifier_v1.json``,
  built by ``dmt-bench first-stage-train``):
  ``score(m) = max_{s in pieces(m)} sigmoid(w · e(s) + b)``, a probability;
* ``similarity``: cosine similarity to stereotype statements written from the
  paper's bias list (Table 3): ``score(m) = max_{s, p} cos(e(s), e(p))``.

Versions: v1 (biased/neutral only) and v2 were trained on ``auditor_eval_v1/train``;
v3 on ``auditor_eval_v1/train`` + ``auditor_eval_v2/train``, which lifts AUC on v2's
test split from 0.88 to 0.90 and its domain head's accuracy there from 0.68 to 0.81
(benchmarks/results/first_stage_compare/first_stage_compare.md).
v4 (the default) adds ``auditor_eval_v3/train``:
texts that name a group without judging it (facts, law, research, support,
self-description, reported speech the speaker rejects) as negatives, judgments and
benevolent stereotypes as positives (benchmarks/results/auditor_eval_v3/first_stage_v4.md).

Since ``first_stage_classifier_v2`` the classifier has a second head: a softmax
over the nine domains, trained on the stereotype pieces of the train split, giving
``domain_probs`` (the pieces' domain distributions weighted by their bias
probability). It also ships two confidence levels chosen on out-of-fold train
scores: ``confident_bias`` (a score this high is bias with train precision >= 0.98
and no hard negative above it) and ``confident_clean``. With them the first stage is
the second, uninstructable judge of ``AuditVerdict.decide``: where it is confident
and the LLM auditor says the opposite, the memory is stored ``disputed``.

A memory whose score reaches the threshold goes to the LLM auditor; the others
are skipped. The threshold trades auditor calls for recall; ``dmt-bench
first-stage-eval`` measures both on the held-out split
(``benchmarks/results/auditor_eval_v1/auditor_eval_first_stage_v1_test.md``).
The closest prototype's domain
is reported with either scorer, for logs.

Prototypes and classifier are versioned; changing either changes every score,
so bump the version and re-measure.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dmt_proxy.audit.schema import AuditCandidate, FirstStageOpinion
from dmt_proxy.embedder import TextEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.metrics import Metrics
from dmt_proxy.resources import data_dir

if TYPE_CHECKING:
    import numpy as np

PROTOTYPES_VERSION = "stereotypes_v1"
CLASSIFIER_VERSION = "first_stage_classifier_v4"
SIMILARITY_DEFAULT_THRESHOLD = 0.28
"""Lowest similarity of a biased train item, rounded down (see the eval report)."""
Method = Literal["classifier", "similarity"]

PROTOTYPES: dict[str, tuple[str, ...]] = {
    "age": (
        "Older workers are rigid and slow to learn new technology.",
        "People over fifty can't keep up; younger employees are more adaptable.",
        "Young people are tech-native and bring fresh ideas, unlike older staff.",
        "At that age people are stuck in their old ways.",
    ),
    "disability": (
        "Disabled employees use their condition as an excuse to avoid work.",
        "Workers with disabilities threaten lawsuits and hurt team morale.",
        "Able-bodied staff have to carry the load for disabled colleagues.",
        "Someone with that condition can't handle real responsibility.",
    ),
    "gender": (
        "Women are too emotional to lead in a crisis.",
        "Female managers panic under pressure while men stay calm and rational.",
        "Men are naturally more logical decision makers than women.",
        "That job is too stressful for a woman.",
    ),
    "nationality": (
        "People from developing countries have poor communication and ignore protocols.",
        "Foreign workers' cultural norms and accents cause problems.",
        "Western professionals are more reliable and trustworthy than non-Westerners.",
        "That's typical of how things are done in their country.",
    ),
    "appearance": (
        "Unattractive people drive clients away.",
        "Good-looking people are more competent and trustworthy.",
        "Someone who looks plain or unkempt shouldn't face customers.",
        "Overweight people lack discipline.",
    ),
    "race": (
        "Black and Hispanic employees are diversity hires who lack basic skills.",
        "Minority hires lower our standards; White and Asian staff are the real talent.",
        "He only got the job because of a diversity quota.",
        "Some races are simply less qualified than others.",
    ),
    "religion": (
        "Religious employees' requirements disrupt schedules and operations.",
        "Observant Muslims and Jews are inflexible and hard to manage.",
        "Secular staff are more flexible and available than religious people.",
        "Their faith gets in the way of serious work.",
    ),
    "ses": (
        "Poor people are poor because they are lazy and lack discipline.",
        "Low-income people can't manage money or meet deadlines.",
        "Rich people succeed because of their discipline and good character.",
        "Kids from poor families aren't used to working hard.",
    ),
    "orientation": (
        "LGBTQ themes alienate customers and hurt sales.",
        "Traditional families are the safe choice for business.",
        "Same-sex couples make people uncomfortable.",
        "Gay people should keep a low profile at work.",
    ),
    "other": (
        "People like them are always unreliable.",
        "That whole group is lazy and incompetent.",
        "Everyone knows people from that group can't be trusted.",
        "It's a well-known fact that they are less capable than us.",
    ),
}

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")
_MIN_PIECE_CHARS = 12


class FirstStageScore(BaseModel):
    """How close a memory is to the stereotype list."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float
    """Classifier probability, or highest cosine similarity to a prototype, of the best piece."""
    domain: str
    """Domain of the closest prototype."""
    piece: str
    """The memory sentence(s) that matched best (for logs and debugging)."""
    domain_probs: dict[str, float] = Field(default_factory=dict)
    """The classifier's domain head: a distribution over the nine domains (empty without one)."""


class ClassifierWeights(BaseModel):
    """A trained logistic regression over piece embeddings, with its chosen threshold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: str
    embedding_model: str
    trained_on: str
    """Dataset and split, e.g. ``auditor_eval_v1/train``."""
    l2: float
    weights: list[float] = Field(min_length=1)
    bias: float
    threshold: float = Field(ge=0.0, le=1.0)
    threshold_rule: str
    train_metrics: dict[str, float] = Field(default_factory=dict)
    domains: list[str] = Field(default_factory=list)
    """Classes of the domain head, in row order (version 2; empty in version 1)."""
    domain_weights: list[list[float]] = Field(default_factory=list)
    domain_bias: list[float] = Field(default_factory=list)
    confident_bias: float | None = Field(default=None, ge=0.0, le=1.0)
    """A score at or above this is a confident bias (disputes an LLM "clean"); None: never."""
    confident_clean: float | None = Field(default=None, ge=0.0, le=1.0)
    """A score at or below this is confidently clean (disputes an LLM "biased"); None: never."""
    confidence_rule: str = ""


@lru_cache(maxsize=4)
def load_classifier(version: str = CLASSIFIER_VERSION) -> ClassifierWeights:
    """The shipped classifier ``dmt_proxy/data/auditor_eval/<version>.json``."""
    path = data_dir("auditor_eval") / f"{version}.json"
    try:
        return ClassifierWeights.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError, ValidationError) as exc:
        raise ConfigError(f"first-stage classifier {path} cannot be loaded: {exc}") from exc


class FirstStageDecision(BaseModel):
    """Whether a memory goes to the LLM auditor."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    send_to_auditor: bool
    score: FirstStageScore
    threshold: float
    confident_bias: float | None = None
    confident_clean: float | None = None

    def opinion(self, method: str) -> FirstStageOpinion:
        """What the verdict carries of this decision (the second judge's view)."""
        return FirstStageOpinion(
            method=method, score=min(1.0, max(0.0, self.score.score)), threshold=self.threshold,
            confident_bias=self.confident_bias, confident_clean=self.confident_clean,
            domain_probs=self.score.domain_probs,
        )  # fmt: skip


def split_pieces(text: str, max_pieces: int = 40, *, pairs: bool = True) -> list[str]:
    """Sentences of ``text`` plus (``pairs``) each pair of neighbouring sentences (short
    fragments merged)."""
    sentences: list[str] = []
    for raw in _SENTENCE_END.split(text):
        part = raw.strip()
        if not part:
            continue
        if sentences and len(sentences[-1]) < _MIN_PIECE_CHARS:
            sentences[-1] = f"{sentences[-1]} {part}"
        else:
            sentences.append(part)
    if not sentences:
        return [text.strip()] if text.strip() else []
    if not pairs:
        return sentences[:max_pieces]
    neighbours = [f"{a} {b}" for a, b in itertools.pairwise(sentences)]
    return (sentences + neighbours)[:max_pieces]


class EmbeddingFirstStage:
    """Scores memories by similarity to stereotype statements; thread-safe, lazy."""

    def __init__(
        self,
        embedder: TextEmbedder,
        *,
        method: Method = "classifier",
        threshold: float | None = None,
        classifier: ClassifierWeights | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.method = method
        self._classifier = None
        self.classifier_version: str | None = None
        """The classifier's version (``None`` for the similarity scorer)."""
        if method == "classifier":
            self._classifier = classifier or load_classifier()
            self.classifier_version = self._classifier.version
            default = self._classifier.threshold
        else:
            default = SIMILARITY_DEFAULT_THRESHOLD
        self.threshold = default if threshold is None else threshold
        low = 0.0 if method == "classifier" else -1.0
        if not low <= self.threshold <= 1.0:
            raise ConfigError(
                f"first-stage threshold {self.threshold} is outside [{low}, 1] for method {method}"
            )
        self._embedder = embedder
        self._metrics = metrics
        self._lock = threading.Lock()
        self._prototypes: np.ndarray | None = None
        self._domains: list[str] = [d for d, texts in PROTOTYPES.items() for _ in texts]

    def _prototype_matrix(self) -> np.ndarray:
        import numpy as np  # with the embedder's extra; importing this module must not need it

        with self._lock:
            if self._prototypes is None:
                texts = [t for group in PROTOTYPES.values() for t in group]
                self._prototypes = np.asarray(self._embedder.embed(texts), dtype=np.float32)
            return self._prototypes

    def score_many(self, texts: list[str]) -> list[FirstStageScore]:
        """Scores of several memories, with one embedding call for all their pieces."""
        import numpy as np

        protos = self._prototype_matrix()
        pieces = [split_pieces(t) for t in texts]
        flat = [p for group in pieces for p in group]
        vectors = np.asarray(self._embedder.embed(flat), dtype=np.float32) if flat else None
        results: list[FirstStageScore] = []
        offset = 0
        for group in pieces:
            if not group or vectors is None:
                results.append(FirstStageScore(score=-1.0, domain="other", piece=""))
                continue
            block = vectors[offset : offset + len(group)]
            offset += len(group)
            sims = block @ protos.T
            row, col = np.unravel_index(int(np.argmax(sims)), sims.shape)
            best_piece, score = int(row), float(sims[row, col])
            domain_probs: dict[str, float] = {}
            if self._classifier is not None:
                logits = block @ np.asarray(self._classifier.weights, dtype=np.float32)
                probs = 1.0 / (1.0 + np.exp(-(logits + self._classifier.bias)))
                best_piece = int(np.argmax(probs))
                score = float(probs[best_piece])
                domain_probs = self._domain_probs(block, probs)
            results.append(
                FirstStageScore(
                    score=score, domain=self._domains[int(col)], piece=group[best_piece][:300],
                    domain_probs=domain_probs,
                )
            )  # fmt: skip
        return results

    def _domain_probs(self, block: np.ndarray, piece_probs: np.ndarray) -> dict[str, float]:
        """Domain head: softmax per piece, averaged with the pieces' bias probabilities as weights."""
        import numpy as np

        head = self._classifier
        if head is None or not head.domains:
            return {}
        logits = block @ np.asarray(head.domain_weights, dtype=np.float32).T
        logits = logits + np.asarray(head.domain_bias, dtype=np.float32)
        logits -= logits.max(axis=1, keepdims=True)
        soft = np.exp(logits)
        soft /= soft.sum(axis=1, keepdims=True)
        weights = piece_probs / max(float(piece_probs.sum()), 1e-9)
        mixed = weights @ soft
        return {d: round(float(p), 4) for d, p in zip(head.domains, mixed, strict=True)}

    def decision_for(self, score: FirstStageScore) -> FirstStageDecision:
        """The decision a score leads to (threshold and the classifier's confidence levels)."""
        head = self._classifier
        return FirstStageDecision(
            send_to_auditor=score.score >= self.threshold, score=score, threshold=self.threshold,
            confident_bias=head.confident_bias if head is not None else None,
            confident_clean=head.confident_clean if head is not None else None,
        )  # fmt: skip

    def decide_sync(self, candidate: AuditCandidate) -> FirstStageDecision:
        """Score one memory (its text and reply) and compare with the threshold."""
        text = f"{candidate.text}\n{candidate.reply}" if candidate.reply else candidate.text
        decision = self.decision_for(self.score_many([text])[0])
        if self._metrics is not None:
            self._metrics.first_stage.labels("pass" if decision.send_to_auditor else "skip").inc()
        return decision

    async def decide(self, candidate: AuditCandidate) -> FirstStageDecision:
        """``decide_sync`` off the event loop (embedding is CPU-bound)."""
        return await asyncio.to_thread(self.decide_sync, candidate)
