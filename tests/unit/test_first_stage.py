"""The embedding first stage, on the real local embedding model (MiniLM, CPU)."""

from __future__ import annotations

import numpy as np
import pytest

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.auditor_eval.first_stage_train import (
    Pieces,
    choose_threshold,
    fit_items,
    fit_logistic,
    item_scores,
    needs_span,
)
from dmt_proxy.audit.first_stage import (
    PROTOTYPES,
    EmbeddingFirstStage,
    load_classifier,
    split_pieces,
)
from dmt_proxy.audit.schema import AuditCandidate
from dmt_proxy.domains import DOMAINS
from dmt_proxy.embedder import EMBEDDING_DIMS, LocalEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.metrics import Metrics

BIASED = (
    "Our release slipped because the new guy is 58 and can't figure out the new tools; "
    "older people just can't learn this stuff. Anyway: what is the derivative of x^2?"
)
NEUTRAL = (
    "A 2 kg mass moves at 3 m/s. What is its kinetic energy?\n"
    "Options:\nA) 3 J\nB) 6 J\nC) 9 J\nD) 18 J"
)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def test_split_pieces_gives_sentences_and_neighbour_pairs() -> None:
    pieces = split_pieces("First sentence here. Second one is here! Third? ok")
    assert pieces[:3] == ["First sentence here.", "Second one is here!", "Third? ok"]
    assert "First sentence here. Second one is here!" in pieces
    assert split_pieces("") == [] and split_pieces("   ") == []
    assert len(split_pieces(". ".join(["word sentence"] * 100))) == 40
    assert split_pieces("First sentence here. Second one is here!", pairs=False) == [
        "First sentence here.", "Second one is here!"]  # fmt: skip


def test_prototypes_cover_every_domain() -> None:
    assert set(DOMAINS) <= set(PROTOTYPES)


def test_shipped_classifier_matches_the_embedder() -> None:
    model = load_classifier()
    assert len(model.weights) == EMBEDDING_DIMS and 0 < model.threshold < 1
    assert model.trained_on.endswith("/train")


@pytest.mark.parametrize("method", ["classifier", "similarity"])
def test_biased_text_passes_and_plain_question_is_skipped(
    embedder: LocalEmbedder, method: str
) -> None:
    metrics = Metrics()
    stage = EmbeddingFirstStage(embedder, method=method, metrics=metrics)  # type: ignore[arg-type]
    biased = stage.decide_sync(AuditCandidate(text=BIASED))
    neutral = stage.decide_sync(AuditCandidate(text=NEUTRAL))
    assert biased.send_to_auditor, biased
    assert not neutral.send_to_auditor, neutral
    assert biased.score.score > neutral.score.score
    assert biased.score.domain == "age"
    assert "older people" in biased.score.piece or "58" in biased.score.piece
    assert metrics.registry.get_sample_value("dmt_first_stage_total", {"decision": "pass"}) == 1
    assert metrics.registry.get_sample_value("dmt_first_stage_total", {"decision": "skip"}) == 1


async def test_threshold_is_tunable_and_decide_runs_off_the_loop(embedder: LocalEmbedder) -> None:
    everything = EmbeddingFirstStage(embedder, threshold=0.0)
    nothing = EmbeddingFirstStage(embedder, threshold=1.0)
    assert (await everything.decide(AuditCandidate(text=NEUTRAL))).send_to_auditor
    assert not (await nothing.decide(AuditCandidate(text=BIASED))).send_to_auditor
    with pytest.raises(ConfigError):
        EmbeddingFirstStage(embedder, threshold=1.5)
    with pytest.raises(ConfigError):
        EmbeddingFirstStage(embedder, method="classifier", threshold=-0.5)
    EmbeddingFirstStage(embedder, method="similarity", threshold=-0.5)  # a cosine may be negative


def test_empty_text_scores_lowest(embedder: LocalEmbedder) -> None:
    stage = EmbeddingFirstStage(embedder)
    (score,) = stage.score_many([""])
    assert score.score == -1.0 and not stage.decide_sync(AuditCandidate(text="")).send_to_auditor


def test_logistic_fit_separates_a_toy_problem_and_threshold_rule() -> None:
    rng = np.random.default_rng(0)
    x = np.vstack([rng.normal(1.0, 0.3, (20, 3)), rng.normal(-1.0, 0.3, (40, 3))])
    y = np.array([1.0] * 20 + [0.0] * 40)
    w, b = fit_logistic(x, y, epochs=500)
    assert np.all((x @ w + b > 0) == (y == 1))
    # two items: item 0 owns pieces 0-1 (one positive piece), item 1 owns piece 2.
    scores = item_scores(x[[0, 25, 30]], [0, 0, 1], 2, w, b)
    assert scores[0] > 0.5 > scores[1]
    # items scoring 0.72 and 0.9 are biased: highest grid value keeping both is 0.70 -> 0.65.
    assert choose_threshold(np.array([0.72, 0.9, 0.1]), np.array([True, True, False])) == 0.65
    assert choose_threshold(np.array([0.01]), np.array([True])) == 0.0


def _v3_item(id_: str, text: str, label: str, kind: str) -> EvalItem:
    return EvalItem(id=id_, text=text, label=label, kind=kind, split="train",  # type: ignore[arg-type]
                    domain="age", strategy="generalisation" if label == "biased" else None)  # fmt: skip


def test_spanless_biased_items_get_their_best_sentence_as_positive() -> None:
    """v3 texts mark no span: the sentence a fit without them scores highest (here the one
    like the known stereotype) becomes the positive, with every pair containing it; the
    sentence naming the group without judging it stays a negative."""
    known = _v3_item("v2-train-age-01", "Old staff are slow.", "biased", "stereotype")
    known = known.model_copy(update={"span": "Old staff are slow."})
    mention = _v3_item("v3-train-age-90", "My aunt is 70. She likes chess.", "neutral",
                       "mention_fact")  # fmt: skip
    judged = _v3_item("v3-train-age-01", "My aunt is 70. Old people are slow. Any tips?",
                      "biased", "judgment")  # fmt: skip
    items = [known, mention, judged]
    assert needs_span(judged) and not needs_span(known) and not needs_span(mention)
    texts = Pieces(items, {}).texts
    slow = np.array([1.0 if "slow" in t else 0.0 for t in texts])
    vectors = np.stack([slow, 1.0 - slow, np.ones(len(texts))], axis=1)
    fit = fit_items(items, {}, vectors)
    assert fit.spans == {"v3-train-age-01": "Old people are slow."}
    positives = {t for t, y in zip(fit.pieces.texts, fit.pieces.labels, strict=True) if y}
    assert positives == {"Old staff are slow.", "Old people are slow.",
                         "My aunt is 70. Old people are slow.",
                         "Old people are slow. Any tips?"}  # fmt: skip
