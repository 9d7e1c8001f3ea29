"""Two judges: the embedding classifier's opinion, disputes, and the combined domain vote.

The LLM side is the shipped ScriptedAuditor (a fake: these tests are about how two
opinions are decided, counted and shown); the classifier is the real shipped one
on the real local embedding model.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.first_stage import EmbeddingFirstStage, load_classifier
from dmt_proxy.audit.schema import (
    AuditCandidate,
    AuditVerdict,
    FirstStageOpinion,
)
from dmt_proxy.audit.stages import StagedAuditor
from dmt_proxy.audit.vote import combine_domains
from dmt_proxy.domains import DOMAINS
from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import AuditPolicy, Mode, TagAction
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.auditor import ScriptedAuditor


def opinion(score: float, **probs: float) -> FirstStageOpinion:
    return FirstStageOpinion(score=score, threshold=0.65, confident_bias=0.98,
                             confident_clean=0.3, domain_probs=probs)  # fmt: skip


def test_combined_vote_by_hand() -> None:
    # 0.5·{race .6, gender .4} + 0.5·{gender .9, race .1} = {race .35, gender .65}
    assert (
        combine_domains({"race": 0.6, "gender": 0.4}, "race", {"gender": 0.9, "race": 0.1})
        == "gender"
    )
    # One-hot LLM (JSON verdict) against an unsure classifier: the LLM's domain.
    assert combine_domains(None, "age", {"age": 0.3, "ses": 0.4, "race": 0.3}) == "age"
    # A tie goes to the LLM's domain; a judge without an opinion drops out.
    assert combine_domains(None, "age", {"ses": 1.0}) == "age"
    assert combine_domains(None, None, {"ses": 0.7, "age": 0.3}) == "ses"
    assert combine_domains(None, None, None) is None and combine_domains({}, None, {}) is None
    assert (
        combine_domains({"race": 1.0}, "race", {"disability": 1.0}, llm_weight=0.3) == "disability"
    )


def test_llm_clean_but_classifier_sure_is_disputed() -> None:
    verdict = AuditVerdict.clean(score=0.1, auditor="m@p").model_copy(
        update={"first_stage": opinion(0.99, race=0.8, ses=0.2)}
    )
    decision = decide(verdict, AuditPolicy(action=TagAction.QUARANTINE))
    assert decision.status is AuditStatus.DISPUTED and decision.outcome == "disputed"
    assert decision.store and decision.action is TagAction.TAG  # never quarantined on one word
    assert decision.tag is not None and decision.tag.bias_type == "race"
    assert decision.tag.first_stage_score == 0.99 and decision.tag.score == 0.1
    assert "confident of a race bias" in decision.tag.rationale


def test_llm_biased_but_classifier_sure_clean_is_disputed() -> None:
    verdict = AuditVerdict.biased("age", score=0.9).model_copy(update={"first_stage": opinion(0.2)})
    decision = decide(verdict, AuditPolicy())
    assert decision.status is AuditStatus.DISPUTED and decision.tag is not None
    assert decision.tag.bias_type == "age"


def test_agreement_or_an_unsure_classifier_keeps_the_llm_verdict() -> None:
    policy = AuditPolicy()
    biased = AuditVerdict.biased("disability", score=0.9).model_copy(
        update={
            "first_stage": opinion(0.99, race=0.9, disability=0.1),
            "domain_probs": {"disability": 0.4, "race": 0.6},
        }
    )
    decision = decide(biased, policy)
    assert decision.status is AuditStatus.TAGGED and decision.tag is not None
    assert decision.tag.bias_type == "race"  # the combined vote, not the LLM's argmax alone
    assert decision.tag.first_stage_score == 0.99
    clean = AuditVerdict.clean().model_copy(update={"first_stage": opinion(0.9, race=1.0)})
    assert decide(clean, policy).status is AuditStatus.CLEAN  # 0.9 < confident_bias 0.98
    no_levels = FirstStageOpinion(score=1.0, threshold=0.28, method="similarity")
    unsure = AuditVerdict.clean().model_copy(update={"first_stage": no_levels})
    assert decide(unsure, policy).status is AuditStatus.CLEAN
    failed = AuditVerdict.failed("bad").model_copy(update={"first_stage": opinion(0.99, race=1.0)})
    assert decide(failed, policy).status is AuditStatus.FAILED  # a failure is never hidden


def test_shipped_classifier_has_a_domain_head_and_confidence_levels() -> None:
    model = load_classifier()
    assert model.version == "first_stage_classifier_v4" and model.domains == list(DOMAINS)
    trained = "auditor_eval_v1/train+auditor_eval_v2/train+auditor_eval_v3/train"
    assert model.trained_on == trained
    assert load_classifier("first_stage_classifier_v3").version == "first_stage_classifier_v3"
    assert len(model.domain_weights) == len(DOMAINS) == len(model.domain_bias)
    assert model.confident_bias is not None and model.confident_bias > model.threshold
    assert model.confident_clean is None or model.confident_clean <= model.threshold


@pytest.fixture(scope="module")
def stage() -> EmbeddingFirstStage:
    return EmbeddingFirstStage(LocalEmbedder())


BIASED = (
    "We lost the account because the analyst they sent was a diversity hire, a Black guy "
    "who clearly lacked the basics; the White and Asian folks had to redo everything."
)


def test_domain_head_names_the_group(stage: EmbeddingFirstStage) -> None:
    (score,) = stage.score_many([BIASED])
    assert max(score.domain_probs, key=lambda d: score.domain_probs[d]) == "race"
    assert abs(sum(score.domain_probs.values()) - 1.0) < 1e-3


async def test_staged_auditor_carries_the_classifiers_opinion(stage: EmbeddingFirstStage) -> None:
    judge = ScriptedAuditor([AuditVerdict.clean(score=0.05)])
    verdict = await StagedAuditor(judge, first_stage=stage).audit(AuditCandidate(text=BIASED))
    assert verdict.first_stage is not None and verdict.first_stage.score > 0.9
    assert verdict.first_stage.domain_probs
    skipped = await StagedAuditor(judge, first_stage=stage).audit(
        AuditCandidate(text="What is the boiling point of water at sea level?")
    )
    assert skipped.first_stage is not None and skipped.first_stage.score < 0.65
    assert len(judge.calls) == 1  # the plain question never reached the LLM


async def test_worker_counts_disputes_apart_from_tags(tmp_path: Path) -> None:
    metrics = Metrics()
    backend = InMemoryBackend()
    outbox = SqliteOutbox(tmp_path / "outbox.sqlite3")
    disputed = AuditVerdict.clean(score=0.1).model_copy(
        update={"first_stage": opinion(0.99, gender=1.0)}
    )
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory",
                          auditor=ScriptedAuditor([disputed]), policy=AuditPolicy(),
                          metrics=metrics)  # fmt: skip
    scope = Scope(user="u")
    await outbox.enqueue(
        Exchange(scope=scope, query="q", answer="a", request_id="r", mode=Mode.DMT)
    )
    (item,) = await outbox.pending()
    await worker.process(item)
    (record,) = await backend.list(scope)
    assert record.audit_status is AuditStatus.DISPUTED and record.tag is not None
    assert record.tag.bias_type == "gender"
    get = metrics.registry.get_sample_value
    assert get("dmt_audits_total", {"outcome": "disputed"}) == 1
    assert get("dmt_tags_total", {"bias_type": "gender", "action": "tag"}) == 0
    await outbox.aclose()


async def test_replayed_pipeline_equals_the_live_pipeline(stage: EmbeddingFirstStage) -> None:
    # The replay (LLM verdicts of every item + the first stage offline) must decide exactly
    # as StagedAuditor does live; the scripted LLM answers biased for biased items.
    from dmt_bench.auditor_eval.dataset import DATASET_V2, dataset_path, load_items, select
    from dmt_bench.auditor_eval.replay import replay
    from dmt_bench.auditor_eval.runner import ItemResult

    items = select(load_items(dataset_path(DATASET_V2)), split="test", limit=16)
    by_text = {i.text: i for i in items}

    def llm(candidate: AuditCandidate) -> AuditVerdict:
        item = by_text[candidate.text]
        if item.biased:
            return AuditVerdict.biased("age", score=0.3 if item.strategy == "benevolent" else 0.8)
        return AuditVerdict.clean(score=0.2)

    live = StagedAuditor(ScriptedAuditor(llm), first_stage=stage)
    live_verdicts = [await live.audit(AuditCandidate(text=i.text)) for i in items]
    llm_only = [ItemResult(item=i, verdict=llm(AuditCandidate(text=i.text)), latency_s=1.0)
                for i in items]  # fmt: skip
    replayed = replay(llm_only, stage)
    policy = AuditPolicy()
    for item, verdict, result in zip(items, live_verdicts, replayed, strict=True):
        assert result.verdict is not None
        replayed_decision, live_decision = decide(result.verdict, policy), decide(verdict, policy)
        assert replayed_decision.status == live_decision.status, item.id
        assert (replayed_decision.tag is None) == (live_decision.tag is None)
        if replayed_decision.tag is not None and live_decision.tag is not None:
            assert replayed_decision.tag.bias_type == live_decision.tag.bias_type
        # Embedding one text or a batch differs in the last float bits only.
        assert result.verdict.first_stage is not None and verdict.first_stage is not None
        assert abs(result.verdict.first_stage.score - verdict.first_stage.score) < 1e-3
        assert result.verdict.auditor == verdict.auditor
    assert any(r.latency_s == 0.0 for r in replayed)  # some plain items never reach the LLM


def test_the_vote_keeps_to_the_domains_the_text_names() -> None:
    # The LLM leans gender, the classifier race; the text names only a racial group.
    llm, first = {"gender": 0.5, "race": 0.2, "age": 0.3}, {"race": 0.4, "gender": 0.6}
    assert combine_domains(llm, "gender", first) == "gender"
    assert combine_domains(llm, "gender", first, within=("race",)) == "race"
    # Several named: the judges choose among them; the LLM's domain wins a tie.
    assert combine_domains(llm, "gender", first, within=("race", "age")) == "race"
    assert combine_domains({"age": 0.5, "race": 0.5}, "age", None, within=("race", "age")) == "age"
    # No judge gives a named domain any mass: the first one the text names.
    assert combine_domains(None, "gender", None, within=("religion",)) == "religion"
    # Nothing named: the vote is as before.
    assert combine_domains(llm, "gender", first, within=()) == "gender"


async def test_a_tag_names_a_domain_of_a_group_in_the_text() -> None:
    text = "the Black users are always the ones starting drama, like clockwork every weekend"
    gender = AuditVerdict.biased("gender", score=0.9).model_copy(
        update={"domain_probs": {"gender": 0.49, "race": 0.22, "age": 0.19, "other": 0.1}}
    )
    verdict = await StagedAuditor(ScriptedAuditor([gender])).audit(AuditCandidate(text=text))
    assert verdict.text_domains == ("race",)
    decision = decide(verdict, AuditPolicy())
    assert decision.tag is not None and decision.tag.bias_type == "race"
    # A text naming no group keeps the judges' vote.
    plain = await StagedAuditor(ScriptedAuditor([gender])).audit(
        AuditCandidate(text="they are always the ones starting drama")
    )
    assert plain.text_domains == ()
    assert (tag := decide(plain, AuditPolicy()).tag) is not None and tag.bias_type == "gender"


async def test_replaying_a_pipeline_run_equals_the_live_pipeline(
    stage: EmbeddingFirstStage,
) -> None:
    # A pipeline run's verdicts (fused, some decided by the gate alone, some not English)
    # replayed with the same classifier and fusion decide as the live pipeline did; an item
    # the gate cleared gets the stated bound only if the new gate would send it on.
    from dmt_bench.auditor_eval.dataset import (
        DATASET_V2,
        DATASET_V3,
        dataset_path,
        load_items,
    )
    from dmt_bench.auditor_eval.replay import llm_verdict, replay
    from dmt_bench.auditor_eval.runner import ItemResult
    from dmt_proxy.audit.logprob import JudgeFusion

    train = [i for i in load_items(dataset_path(DATASET_V3)) if i.split == "train"]
    plain = [i for i in load_items(dataset_path(DATASET_V2))
             if i.kind == "question" and i.split == "train"][:6]  # fmt: skip
    items = [*train[:8], *[i for i in train if i.language == "fr"][:2], *train[-8:], *plain]
    by_text = {i.text: i for i in items}

    def llm(candidate: AuditCandidate) -> AuditVerdict:
        item = by_text[candidate.text]
        p = 0.8 if item.biased else 0.45
        verdict = AuditVerdict.biased("age", score=p) if p >= 0.5 else AuditVerdict.clean(score=p)
        return verdict.model_copy(update={"p_raw": p, "domain_probs": {"age": 0.7, "race": 0.3}})

    fusion = JudgeFusion(w_llm=1.5, w_first=1.0, b=-0.4, classifier="c", trained_on="t", n=1,
                         positives=1, auc_llm=0.5, auc_first=0.5, auc_fused=0.5)  # fmt: skip
    live = StagedAuditor(ScriptedAuditor(llm), first_stage=stage, fusion=fusion)
    verdicts = [await live.audit(AuditCandidate(text=i.text)) for i in items]
    run = [
        ItemResult(item=i, verdict=v, latency_s=1.0) for i, v in zip(items, verdicts, strict=True)
    ]
    assert any(llm_verdict(v) is None for v in verdicts)  # the gate decided some alone
    assert any(v.first_stage is None for v in verdicts)  # French: the LLM alone
    replayed = replay(run, stage, fusion=fusion, missing="tagged")
    policy = AuditPolicy()
    for item, verdict, result in zip(items, verdicts, replayed, strict=True):
        assert result.verdict is not None
        assert decide(result.verdict, policy).status == decide(verdict, policy).status, item.id
        assert abs(result.verdict.score - verdict.score) < 1e-3
        assert not result.verdict.auditor.startswith("bound/")
    fused = next(v for v in verdicts if v.llm_score is not None)
    own = llm_verdict(fused)
    assert own is not None and own.score == fused.llm_score and own.first_stage is None
    # A gate that clears nothing alone needs the LLM on what the run's gate cleared: bounds.
    opened = EmbeddingFirstStage(LocalEmbedder(), threshold=0.0)
    bounded = replay(run, opened, fusion=fusion, missing="tagged")
    stand_ins = [
        r for r in bounded if r.verdict is not None and r.verdict.auditor == "bound/tagged"
    ]
    assert len(stand_ins) == sum(llm_verdict(v) is None for v in verdicts)
