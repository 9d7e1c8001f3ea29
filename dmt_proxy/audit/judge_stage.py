"""What the trained judge's score of a memory means for its audit (pure; no model call).

``judge_call`` turns a ``JudgeScore`` (``dmt_proxy.audit.trained_judge``) into:

* the judge's opinion as the verdict's second judge (``FirstStageOpinion``, method
  ``judge_v2``), so ``decide`` disputes an LLM that contradicts a confident judge;
* a ``learned_manipulation`` finding when the manipulation head reaches its threshold
  (a second opinion beside the normaliser's patterns: it reads wordings no pattern lists);
* a verdict the judge gives alone when it is confident: the user's words at or below
  ``confident_clean`` (and no confident bias in the assistant's) are clean; at or above
  ``confident_bias`` biased, in every language, but only when the text names a group the
  lexicon knows (``text_domains``): a bias is about a group, and a text that names none
  (or names it in words the lexicon lacks) goes to the LLM instead of being tagged by one
  judge that reads register as well as content. Otherwise (the uncertain band, or any
  manipulation finding: a planted verdict is never decided by one judge) ``verdict`` is
  ``None`` and the LLM judges the user's words.

A bias is about a group, so an English text that names none gets no bias tag
(``group_free``): when the lexicon finds no group in the user's (normalised) words and the
LLM names no target that occurs in them, the LLM's biased verdict is kept as its score and
decided clean. English only: the lexicon lists English group words systematically and
other languages' only in part, so elsewhere the LLM's word stands. Findings are kept (a
planted verdict on a group-free text is still tagged for the attempt).

Speakers: the user's words are judged for the user's bias. The assistant's words (the
model's answer the proxy stored with them) are scored too but never sent to the LLM: a
confident bias there is the assistant's own finding (``speaker="assistant"``, or ``"both"``
when the user's words are biased as well), so a memory where only the assistant generalises
is not stored as the user's prejudice, and is not stored clean either.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dmt_proxy.audit.grounding import contains
from dmt_proxy.audit.schema import TRAINED_JUDGE_LABEL, AuditVerdict, FirstStageOpinion
from dmt_proxy.audit.trained_judge import JudgeScore, JudgeWeights, PartScore
from dmt_proxy.audit.vote import as_bias_type, combine_domains
from dmt_proxy.tags import Finding, FindingKind

LEARNED_MANIPULATION = "learned_manipulation"


class JudgeCall(BaseModel):
    """The judge's part in one audit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    reply_domains: tuple[str, ...] = ()
    """The groups the assistant's words name (its bias's domain keeps to them)."""
    fuse: bool = True
    """Combine the LLM's score with the judge's. Not for a text that names no group: there
    the judge reads register as well as content (ordinary complaints score high), so the
    LLM's word stands alone, and the judge's opinion carries no confidence to dispute it."""
    opinion: FirstStageOpinion
    findings: tuple[Finding, ...] = ()
    verdict: AuditVerdict | None = None
    """Decided without the LLM; ``None``: the LLM judges the user's words."""
    assistant_biased: PartScore | None = None
    """The assistant's words, when the judge is confident they carry a bias."""


def opinion_of(part: PartScore | None, weights: JudgeWeights) -> FirstStageOpinion:
    """A part's score as the verdict's second-judge opinion."""
    return FirstStageOpinion(
        method=weights.version, score=min(1.0, max(0.0, part.p_biased if part else 0.0)),
        threshold=weights.confident_clean, confident_bias=weights.confident_bias,
        confident_clean=weights.confident_clean,
        domain_probs=dict(part.domain_probs) if part else {},
    )  # fmt: skip


def judge_call(
    score: JudgeScore, weights: JudgeWeights, *, manipulated: bool,
    text_domains: tuple[str, ...], reply_domains: tuple[str, ...] = (),
) -> JudgeCall:  # fmt: skip
    """The judge's opinion, findings and (when confident) verdict; see the module docstring.
    ``manipulated``: the normaliser already found a manipulation attempt; ``text_domains``
    and ``reply_domains``: the groups the user's and the assistant's words name."""
    user, assistant = score.user, score.of("assistant")
    findings: tuple[Finding, ...] = ()
    if score.p_manipulation >= weights.manipulation_threshold:
        findings = (Finding(kind=FindingKind.MANIPULATION, rule=LEARNED_MANIPULATION,
                            detail=f"{weights.version} manipulation head "
                                   f"{score.p_manipulation:.2f}"),)  # fmt: skip
    sure = assistant is not None and assistant.p_biased >= weights.confident_bias
    echo = assistant if sure and reply_domains else None
    p_user = user.p_biased if user else 0.0
    opinion = opinion_of(user, weights)
    if not text_domains:
        opinion = opinion.model_copy(update={"confident_bias": None, "confident_clean": None})
    if manipulated or findings:
        return JudgeCall(opinion=opinion, findings=findings, assistant_biased=echo,
                         reply_domains=reply_domains, fuse=bool(text_domains))  # fmt: skip
    if p_user >= weights.confident_bias and user is not None and text_domains:
        verdict = alone(user, weights, text_domains, "both" if echo else "user")
        return JudgeCall(opinion=opinion, verdict=verdict, assistant_biased=echo,
                         reply_domains=reply_domains)  # fmt: skip
    if p_user <= weights.confident_clean:
        if echo is not None:
            verdict = alone(echo, weights, reply_domains, "assistant")
            return JudgeCall(opinion=opinion_of(echo, weights), verdict=verdict,
                             assistant_biased=echo, reply_domains=reply_domains)  # fmt: skip
        verdict = AuditVerdict.clean(
            score=p_user, auditor=TRAINED_JUDGE_LABEL,
            rationale=f"{weights.version}: P(judging) {p_user:.2f} <= {weights.confident_clean:.2f}",
        ).model_copy(update={"first_stage": opinion, "text_domains": text_domains})  # fmt: skip
        return JudgeCall(opinion=opinion, verdict=verdict)
    return JudgeCall(opinion=opinion, assistant_biased=echo, reply_domains=reply_domains,
                     fuse=bool(text_domains))  # fmt: skip


def alone(
    part: PartScore, weights: JudgeWeights, text_domains: tuple[str, ...], speaker: str
) -> AuditVerdict:
    """The biased verdict the judge gives alone for ``part`` (domain: its domain head, over
    the domains the text names when it names any)."""
    domain = as_bias_type(combine_domains(None, None, part.domain_probs, within=text_domains))
    whose = {"user": "the user's words", "assistant": "the assistant's words",
             "both": "the user's and the assistant's words"}[speaker]  # fmt: skip
    return AuditVerdict(
        bias_detected=True, bias_type=domain or "other", score=part.p_biased,
        auditor=TRAINED_JUDGE_LABEL, first_stage=opinion_of(part, weights),
        rationale=f"{weights.version}: {whose} judge a group (P {part.p_biased:.2f} >= "
        f"{weights.confident_bias:.2f}, kind {part.kind})",
        llm_domain_weight=0.0, text_domains=text_domains, speaker=speaker,  # type: ignore[arg-type]
    )  # fmt: skip


def with_speaker(verdict: AuditVerdict, call: JudgeCall, weights: JudgeWeights) -> AuditVerdict:
    """The LLM's verdict on the user's words, with the assistant's confident bias added: a
    clean user and a biased assistant is the assistant's bias; both biased is ``both``."""
    echo = call.assistant_biased
    if not verdict.ok:
        return verdict
    if verdict.bias_detected:
        return verdict.model_copy(update={"speaker": "both" if echo else "user"})
    if echo is None:
        return verdict
    assistant = alone(echo, weights, call.reply_domains, "assistant")
    return assistant.model_copy(update={"findings": verdict.findings, "auditor": verdict.auditor,
                                        "llm_score": verdict.score})  # fmt: skip


def group_free(verdict: AuditVerdict, text: str, *, english: bool) -> AuditVerdict:
    """``verdict`` on the user's words ``text``, cleared of a bias when an English text
    names no group (see the module docstring); unchanged otherwise."""
    if not (verdict.ok and verdict.bias_detected and english) or verdict.text_domains:
        return verdict
    if verdict.target_group and contains(text, verdict.target_group):
        return verdict  # the LLM names a group the lexicon lacks, in the text's own words
    return verdict.model_copy(update={
        "bias_detected": False, "bias_type": None, "target_group": "", "tendency": "",
        "score": 0.0, "llm_score": verdict.score, "domain_probs": None,
        "rationale": f"no group named in the text: the LLM's P(biased) {verdict.score:.2f} "
                     "is not a bias about a group",
    })  # fmt: skip
