"""The audit pipeline of one memory: normalise, first stage, LLM auditor, one verdict.

``StagedAuditor`` is itself an ``Auditor`` (candidate in, verdict out), so the
outbox worker, ``dmt-bench auditor-eval --pipeline`` and the adversarial runner
all judge a memory the same way:

1. ``normalize_memory`` (``dmt_proxy.audit.normalize``): the text both judges see,
   and manipulation findings;
2. an oversized memory is judged on a bounded excerpt (head, the sentences that name a
   group, tail: ``grounding.group_excerpt``), stated as an ``excerpt`` finding; it is never
   skipped. The raw text is bounded first (to ``RAW_FACTOR`` times the judges' bound), so
   normalisation costs the same for a 3.5 MB memory as for a 12 KB one;
3. the embedding first stage, when configured, on the text without the normaliser's
   placeholders (``without_placeholders``): a memory it scores below its
   threshold is decided clean without an LLM call, unless normalisation found a
   manipulation attempt or the text is probably not English
   (``dmt_proxy.audit.language``: the classifier was trained on English only, so
   its score on other languages is neither a verdict nor a second opinion; such a
   memory goes to the LLM auditor alone);
4. the LLM auditor (or any other ``Auditor``) on the normalised excerpt; the verdict
   carries the domains of the groups the text names (``text_domains``), to which the
   judges' domain vote keeps.

Every CPU-bound step (bounding, normalisation, the first stage, naming the text's
domains) runs in a worker thread (``asyncio.to_thread``): the event loop only awaits them,
so one long memory never stalls another request. Each step is bounded by the excerpt, so a
thread holds the interpreter in slices of one switch interval (5 ms by default, 1 ms
in ``serve`` and ``worker``: ``dmt_proxy.loop_lag``), not seconds.

The findings and the first stage's opinion ride on the verdict;
``AuditVerdict.decide`` turns a manipulation finding into a tag whatever the judges
concluded, and a confident disagreement of the two judges into ``disputed``.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from dmt_proxy.audit.grounding import group_excerpt, named_domains
from dmt_proxy.audit.judge_stage import group_free, judge_call, with_speaker
from dmt_proxy.audit.language import probably_english
from dmt_proxy.audit.normalize import NORMALIZER_VERSION, normalize_memory, without_placeholders
from dmt_proxy.audit.schema import FIRST_STAGE_LABEL, AuditCandidate, AuditVerdict
from dmt_proxy.audit.trained_judge import TrainedJudge
from dmt_proxy.tags import Finding

if TYPE_CHECKING:
    from dmt_proxy.audit.first_stage import EmbeddingFirstStage, FirstStageDecision
    from dmt_proxy.audit.logprob import JudgeFusion
    from dmt_proxy.audit.protocol import Auditor
    from dmt_proxy.metrics import Metrics
    from dmt_proxy.policy import AuditPolicy, Policy
    from dmt_proxy.upstream.base import ChatModel
    from dmt_proxy.upstream.models import ModelRegistry

AUDIT_MAX_CHARS = 2800
"""Characters of a memory the judges see; longer memories are judged on an excerpt. Below
the LLM prompt's own bound (``auditor_prompt.MEMORY_MAX_CHARS``) with room for the marker."""
REPLY_MAX_CHARS = 800
RAW_FACTOR = 4
"""A raw memory is bounded to this many times the judges' bound before it is normalised:
room for what normalisation removes (hidden characters, injected blocks) while keeping
normalisation's cost bounded (~0.07 s of pure Python at 11,200 characters, against ~10 s
for a 3.5 MB message)."""


def bounded_for_judges(
    text: str, max_chars: int = AUDIT_MAX_CHARS, normalizer: str = NORMALIZER_VERSION
) -> tuple[str, bool, tuple[Finding, ...]]:
    """The text the judges see of ``text`` (bounded, normalised, bounded again), whether
    normalisation found a manipulation attempt, and the findings (normalisation's, then
    the excerpt's). CPU-bound: call it off the event loop."""
    raw, raw_cut = group_excerpt(text, max_chars * RAW_FACTOR)
    normalized = normalize_memory(raw, normalizer)
    judged, cut = group_excerpt(normalized.text, max_chars)
    if raw_cut is not None and cut is not None:  # one finding, in the memory's own positions
        detail = f"{raw_cut.detail}; that excerpt cut again to {max_chars} after normalisation"
        cut = raw_cut.model_copy(update={"detail": detail})
    cut = cut or raw_cut
    return judged, normalized.manipulation, normalized.findings + ((cut,) if cut else ())


def judged_text(text: str, normalizer: str = NORMALIZER_VERSION) -> str:
    """What the judges see of a memory (``bounded_for_judges`` at ``AUDIT_MAX_CHARS``).
    ``StagedAuditor.stage`` stages a candidate this way; replays and reports use this to
    see the same text without a pipeline."""
    return bounded_for_judges(text, AUDIT_MAX_CHARS, normalizer)[0]


class StagedAuditor:
    """Normalisation, the optional first stage and an auditor, as one ``Auditor``."""

    def __init__(
        self,
        auditor: Auditor,
        *,
        first_stage: EmbeddingFirstStage | None = None,
        max_chars: int = AUDIT_MAX_CHARS,
        fusion: JudgeFusion | None = None,
        tau_floor: float = 0.5,
        normalizer: str = NORMALIZER_VERSION,
        kind_fusion: JudgeFusion | None = None,
        judge: TrainedJudge | None = None,
        include_reply: bool = False,
    ) -> None:
        self.auditor = auditor
        self.first_stage = first_stage
        self.judge = judge
        """Judge v2 (``first_stage: judge_v2``); replaces ``first_stage`` when set."""
        self.include_reply = include_reply
        """Show the LLM the assistant's reply too (the trained judge always scores it)."""
        self.max_chars = max_chars
        judged = first_stage is not None or judge is not None
        self.fusion = fusion if judged else None
        self.kind_fusion = kind_fusion if first_stage is not None else None
        """Used instead of ``fusion`` for a verdict that carries the kind question's answer."""
        self.tau_floor = tau_floor
        self.normalizer = normalizer

    @property
    def label(self) -> str:
        """The inner auditor's label (model and prompt), for reports."""
        return str(getattr(self.auditor, "label", type(self.auditor).__name__))

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        """Judge one memory through every stage; ``AuditorUnavailable`` passes through."""
        staged, normalized_manipulation, findings = await asyncio.to_thread(self.stage, candidate)
        if self.judge is not None:
            return await self._audit_with_judge(staged, normalized_manipulation, findings)
        if not self.include_reply:
            staged = staged.model_copy(update={"reply": ""})
        opinion = None
        # Microseconds on the bounded text: no thread hop for it.
        english = self.normalizer == "normalize_v2" or probably_english(staged.text)
        if self.first_stage is not None and english:
            scored = staged.model_copy(update={"text": without_placeholders(staged.text)})
            decision = await self.first_stage.decide(scored)
            opinion = decision.opinion(self.first_stage.method)
            if not decision.send_to_auditor and not normalized_manipulation:
                return skipped_by_first_stage(decision, self.first_stage.method, findings)
        verdict = await self.auditor.audit(staged)
        domains = await asyncio.to_thread(named_domains, staged.text)
        update = {"findings": verdict.findings + findings, "first_stage": opinion,
                  "text_domains": domains}  # fmt: skip
        verdict = verdict.model_copy(update=update)
        fusion = self.fusion
        if self.kind_fusion is not None and verdict.kind_probs:
            fusion = self.kind_fusion
        return fuse(verdict, fusion, self.tau_floor) if fusion else verdict

    async def _audit_with_judge(
        self, staged: AuditCandidate, manipulated: bool, findings: tuple[Finding, ...]
    ) -> AuditVerdict:
        """Judge v2 first (every language, each speaker apart); the LLM only in its band."""
        assert self.judge is not None
        scored = staged.model_copy(update={"text": without_placeholders(staged.text),
                                           "reply": without_placeholders(staged.reply)})  # fmt: skip
        score = await self.judge.score(scored)
        domains = await asyncio.to_thread(named_domains, staged.text)
        reply_domains = await asyncio.to_thread(named_domains, staged.reply) if staged.reply else ()
        call = judge_call(score, self.judge.weights, manipulated=manipulated,
                          text_domains=domains, reply_domains=reply_domains)  # fmt: skip
        findings = findings + call.findings
        if call.verdict is not None:
            return call.verdict.model_copy(update={"findings": findings})
        llm_candidate = staged if self.include_reply else staged.model_copy(update={"reply": ""})
        verdict = await self.auditor.audit(llm_candidate)
        verdict = verdict.model_copy(update={"findings": verdict.findings + findings,
                                             "first_stage": call.opinion,
                                             "text_domains": domains})  # fmt: skip
        if self.fusion is not None and call.fuse:
            verdict = fuse(verdict, self.fusion, self.tau_floor)
        verdict = group_free(verdict, staged.text, english=probably_english(staged.text))
        return with_speaker(verdict, call, self.judge.weights)

    def stage(self, candidate: AuditCandidate) -> tuple[AuditCandidate, bool, tuple[Finding, ...]]:
        """The candidate as the judges see it (normalised, bounded), whether normalisation
        found a manipulation attempt, and the findings to attach. CPU-bound (pure Python,
        bounded by the excerpt): ``audit`` runs it in a worker thread."""
        text, manipulation, findings = bounded_for_judges(candidate.text, self.max_chars,
                                                          self.normalizer)  # fmt: skip
        reply = ""
        if candidate.reply:
            reply = bounded_for_judges(candidate.reply, REPLY_MAX_CHARS, self.normalizer)[0]
        staged = candidate.model_copy(update={"text": text, "reply": reply})
        return staged, manipulation, findings

    async def explain(self, candidate: AuditCandidate, verdict: AuditVerdict) -> AuditVerdict:
        """The deferred rationale of ``verdict`` from the inner auditor, on the same staged
        text (an auditor without ``explain`` returns ``verdict`` unchanged)."""
        explain = getattr(self.auditor, "explain", None)
        if explain is None:
            return verdict
        staged, _, _ = await asyncio.to_thread(self.stage, candidate)
        if not self.include_reply:
            staged = staged.model_copy(update={"reply": ""})
        result: AuditVerdict = await explain(staged, verdict)
        return result


def skipped_by_first_stage(
    decision: FirstStageDecision, method: str, findings: tuple[Finding, ...]
) -> AuditVerdict:
    """The clean verdict of a memory the first stage decided alone, without an LLM call."""
    verdict = AuditVerdict.clean(
        rationale=f"first stage ({method}): score {decision.score.score:.2f} < "
        f"{decision.threshold:.2f}",
        auditor=FIRST_STAGE_LABEL,
    )
    return verdict.model_copy(
        update={"findings": findings, "first_stage": decision.opinion(method)}
    )


def fuse(verdict: AuditVerdict, fusion: JudgeFusion, tau_floor: float) -> AuditVerdict:
    """The verdict with the two judges' combined probability as its score.

    Only a log-prob verdict (it has ``p_raw``) that the first stage judged too is
    combined; the LLM's own score is kept as ``llm_score``. A combined probability at or
    above the lowest tau names a domain: the LLM's, else the judges' vote.
    """
    first = verdict.first_stage
    if not verdict.ok or verdict.p_raw is None or first is None:
        return verdict
    p_judging = (verdict.kind_probs or {}).get("judging") if fusion.w_kind else None
    if verdict.kind_probs and p_judging is None and fusion.w_kind:
        p_judging = 0.0  # the model put no mass on "judging"
    p = round(fusion.apply(verdict.p_raw, first.score, p_judging), 4)
    detected = p >= tau_floor
    bias_type = verdict.bias_type if verdict.bias_detected else None
    if detected and bias_type is None:
        bias_type = verdict.model_copy(update={"bias_detected": False}).voted_domain() or "other"
    return verdict.model_copy(update={
        "score": p, "llm_score": verdict.score, "bias_detected": detected,
        "bias_type": bias_type if detected else None,
        "rationale": f"{verdict.rationale} (combined with the first stage: {p:.2f})".strip(),
    })  # fmt: skip


def build_audit_pipeline(
    policy: Policy,
    registry: ModelRegistry,
    chat: ChatModel,
    *,
    metrics: Metrics | None = None,
    auditor: Auditor | None = None,
) -> StagedAuditor:
    """The audit pipeline ``policy.audit`` describes (``auditor`` replaces the LLM one)."""
    from dmt_proxy.audit.registry import build_auditor

    first_stage, trained = second_judges(policy.audit, metrics=metrics)
    judge = auditor if auditor is not None else build_auditor(policy, registry, chat)
    return staged_auditor(judge, policy.audit, first_stage=first_stage, trained=trained)


def second_judges(
    audit: AuditPolicy, *, metrics: Metrics | None = None
) -> tuple[EmbeddingFirstStage | None, TrainedJudge | None]:
    """The judge beside the LLM that ``audit.first_stage`` names: the MiniLM first stage
    (``embedding``), the trained judge (``judge_v2``) or neither (``off``)."""
    if audit.first_stage == "judge_v2":
        return None, TrainedJudge()
    if audit.first_stage == "embedding":
        from dmt_proxy.audit.first_stage import EmbeddingFirstStage
        from dmt_proxy.embedder import LocalEmbedder

        threshold = audit.first_stage_threshold  # None: the method's own default
        return EmbeddingFirstStage(LocalEmbedder(), metrics=metrics, threshold=threshold), None
    return None, None


def staged_auditor(
    judge: Auditor,
    audit: AuditPolicy,
    *,
    first_stage: EmbeddingFirstStage | None,
    normalizer: str = NORMALIZER_VERSION,
    trained: TrainedJudge | None = None,
) -> StagedAuditor:
    """``judge`` behind normalisation and ``first_stage``, with the judges' fusions of
    ``audit.calibration`` (when ``audit.combine_judges``) and the lowest tau as the floor;
    the proxy and the benchmark runners build the same pipeline here."""
    fusion = kind_fusion = None
    model_key = getattr(judge, "model_key", None)
    second = trained if trained is not None else first_stage
    if audit.combine_judges and second is not None and model_key:
        from dmt_proxy.audit.logprob import load_calibration

        calibration = load_calibration(audit.calibration)
        classifier = second.classifier_version or ""
        fusion = calibration.fusion_for(model_key, classifier)
        if trained is None:
            kind_fusion = calibration.fusion_for(model_key, classifier, kind=True)
    floor = min([audit.tau, *audit.tau_per_domain.values()])
    return StagedAuditor(judge, first_stage=first_stage, fusion=fusion, tau_floor=floor,
                         kind_fusion=kind_fusion, normalizer=normalizer,
                         max_chars=audit.judged_chars, judge=trained,
                         include_reply=audit.include_reply)  # fmt: skip
