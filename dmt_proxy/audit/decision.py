"""The decision: what to do with a memory, given its auditor's verdict and the policy.

The decision (clean / tagged / quarantined / disputed / failed) is a pure function
of a verdict and the policy (``decide(verdict, policy)``),
taken once per memory on the write path (``dmt_proxy.memory.write.verdicts.store_verdict``),
where the outbox worker also counts it.

Decision rule (paper §6.2, "if the suspicion of bias exceeds τ"): a memory is
tagged iff the verdict is valid, ``bias_detected`` is true and
``score >= tau_for(bias_type)``. A verdict with ``bias_detected=false`` and a
high score is contradictory; it is decided *clean* (the explicit boolean wins
over the free-form number, which small models often fill in carelessly), and
the decision carries ``inconsistent=True`` so the caller can log it. The
opposite case (``bias_detected=true`` below τ) is simply clean, as the paper's
threshold intends.

Findings of the normalisation step (``dmt_proxy.audit.normalize``) ride on the
verdict: a ``manipulation`` finding tags the memory even when the judges call it
clean (its tag then has no ``bias_type``, only findings), and is kept on the tag
of a biased or failed memory too; an ``excerpt`` finding (an oversized memory
judged on a bounded excerpt) is kept on whatever tag the memory gets, and a
clean memory carries a findings-only tag to state it. A failed verdict stays
``failed`` (re-auditable), with its findings on the tag.

A planted verdict gets no invented domain: on a memory with a ``manipulation``
finding, a bias type is kept only when both judges independently find a bias
(the LLM's verdict reaches tau *and* the first stage, which judges the text with
the injection removed, scores at or above its threshold; a memory the first stage
did not judge keeps the LLM's word). Otherwise the memory is tagged for the
attempt alone (a findings-only tag): the text that asked for a verdict is not
believed, in either direction, and one judge's word is not a domain.

Two judges. When the embedding first stage also judged the memory, its opinion
rides on the verdict too (``first_stage``). Where the classifier is confident of a
bias (score >= its ``confident_bias``) and the LLM auditor calls the memory clean,
or the classifier is confidently clean (score <= ``confident_clean``) and the LLM
tags it, the memory is ``disputed``: stored with a tag, shown to the agent as
tagged, counted apart. The classifier cannot be talked out of its score, so text
that persuades the LLM alone does not make a memory clean. The tag's domain is
the judges' combined vote (``combine_domains``): the LLM's domain distribution
(from log-probs, or its one named domain) and the classifier's domain head,
averaged with weight ``DOMAIN_VOTE_LLM_WEIGHT`` on the LLM, over the domains of the
groups the text names when it names any (``AuditVerdict.text_domains``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.domains import BiasType
from dmt_proxy.policy import AuditPolicy, TagAction
from dmt_proxy.tags import AuditStatus, BiasTag, FindingKind


class AuditDecision(BaseModel):
    """What to do with a memory, given its verdict and the policy."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: AuditStatus
    """``clean``, ``tagged``, ``quarantined`` or ``failed``."""
    action: TagAction | None = None
    """The policy's action for a tagged memory (``drop`` means: do not store)."""
    tag: BiasTag | None = None
    store: bool = True
    inconsistent: bool = False
    """``bias_detected`` was false but the score reached tau (decided clean)."""
    reason: str = ""

    @property
    def outcome(self) -> str:
        """The ``dmt_audits`` metric label: ``clean``, ``tagged``, ``disputed`` or ``failed``."""
        if self.status in (AuditStatus.FAILED, AuditStatus.DISPUTED, AuditStatus.CLEAN):
            return str(self.status.value)
        return "tagged"


def decide(verdict: AuditVerdict, policy: AuditPolicy) -> AuditDecision:
    """Apply tau (global or per domain), the second judge, the findings and the action."""
    if not verdict.ok:
        return AuditDecision(
            status=AuditStatus.FAILED, tag=verdict.findings_tag(),
            reason=verdict.failure_reason or "auditor failed",
        )  # fmt: skip
    fs = verdict.first_stage
    # A manipulation attempt: a bias type needs both judges (module docstring).
    one_judge = verdict.manipulation and fs is not None and fs.score < fs.threshold
    if verdict.is_biased(policy) and not one_judge:
        assert verdict.bias_type is not None  # is_biased checked it
        domain = verdict.voted_domain() or verdict.bias_type
        tag = verdict.to_tag().model_copy(update={
            "bias_type": domain, "first_stage_score": fs.score if fs else None,
        })  # fmt: skip
        reason = (
            f"{verdict.bias_type} score {verdict.score:.2f} >= tau "
            f"{policy.tau_for(verdict.bias_type):.2f}"
        )
        if fs is not None and fs.sure_clean:
            return _disputed(tag, f"{reason}; first stage sure it is clean ({fs.score:.2f})")
        return _tagging(policy.action_for(domain), tag, reason)
    tau = policy.tau_for(verdict.bias_type) if verdict.bias_type else policy.tau
    inconsistent = not verdict.bias_detected and verdict.score >= tau
    if fs is not None and fs.sure_biased and not verdict.manipulation:
        voted: BiasType = verdict.voted_domain() or "other"
        tag = BiasTag(
            bias_type=voted, score=verdict.score, first_stage_score=fs.score,
            auditor=verdict.auditor, findings=verdict.findings,
            rationale=f"the embedding classifier is confident of a {voted} bias "
            f"({fs.score:.2f}); the LLM auditor judged it clean ({verdict.score:.2f})",
        )  # fmt: skip
        return _disputed(tag, f"LLM clean, first stage sure of {voted} ({fs.score:.2f})")
    if verdict.manipulation:
        rules = sorted({f.rule for f in verdict.findings if f.kind is FindingKind.MANIPULATION})
        found = verdict.findings_tag()
        assert found is not None  # there are findings
        return _tagging(policy.action, found, "manipulation finding: " + ", ".join(rules),
                        inconsistent=inconsistent)  # fmt: skip
    reason = "no bias detected" if not verdict.bias_detected else "score below tau"
    if inconsistent:
        reason = f"bias_detected is false although score is {verdict.score:.2f}; decided clean"
    return AuditDecision(status=AuditStatus.CLEAN, tag=verdict.findings_tag(),
                         inconsistent=inconsistent, reason=reason)  # fmt: skip


def _disputed(tag: BiasTag, reason: str) -> AuditDecision:
    # Shown to the agent as tagged; never quarantined or dropped on one judge's word.
    return AuditDecision(status=AuditStatus.DISPUTED, action=TagAction.TAG, tag=tag, reason=reason)


def _tagging(
    action: TagAction, tag: BiasTag, reason: str, *, inconsistent: bool = False
) -> AuditDecision:
    status = AuditStatus.QUARANTINED if action is TagAction.QUARANTINE else AuditStatus.TAGGED
    return AuditDecision(status=status, action=action, tag=tag, store=action is not TagAction.DROP,
                         inconsistent=inconsistent, reason=reason)  # fmt: skip
