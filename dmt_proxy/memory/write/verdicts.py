"""Storing a verdict: the one place a verdict becomes a memory's status and tag.

``decide(verdict, policy)`` (``dmt_proxy.audit.decision``) is called here and nowhere else on the write path:
the outbox worker and ``audit-backfill`` both hand a verdict to ``store_verdict``,
which decides once and updates (or, for a dropped memory, deletes) the stored
record. The caller counts what the decision says (the worker's metrics); the
auditor that produced the verdict neither decides nor counts.

Grounding happens here too, once, after the judges and the decision, so every path
that stores a verdict (the worker behind chat, MCP and the memory API; backfill; a
reviewer's re-audit) gets it: the decided tag's ``target_group`` and ``tendency`` are
taken from the memory's text and a rationale that does not name that group is dropped
(``dmt_proxy.audit.grounding``). The trail's evidence carries the grounded fields, so
an ungrounded rationale is never stored where a reviewer reads it.

The stored decision is stamped on the memory's provenance (``dmt_proxy.provenance``:
the policy's label, the verdict's auditor, the time), by every path that stores one.

``decide_grounded`` is that decision and grounding alone; the audit API
(``POST /v1/audits``) calls it too, so a text it judges gets the status and tag a memory
of that text would be stored with, while nothing is stored.

``record_verdict`` writes the decided verdict, with its evidence, to the review
trail (``dmt_proxy.memory.write.trail``), where a reviewer reads why a memory got
its status; a memory a reviewer has decided is held there, and the callers check
``Trail.held`` before storing a machine verdict over a human one.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

from dmt_proxy.audit.decision import AuditDecision, decide
from dmt_proxy.audit.grounding import ground_tag
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.write.trail import Trail, TrailEvent, machine_event
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.provenance import AuditStamp

log = logging.getLogger(__name__)


async def store_verdict(
    backend: MemoryBackend, scope: Scope, memory_id: str, verdict: AuditVerdict,
    policy: AuditPolicy, *, text: str, policy_label: str | None = None,
) -> AuditDecision:  # fmt: skip
    """Decide ``verdict`` under ``policy``, ground its tag in ``text`` (the audited memory
    text) and store the decision on memory ``memory_id``, stamping its provenance with what
    decided it: ``policy_label`` (``Policy.label``), the verdict's auditor, now.

    Returns the decision once the backend has it; a backend failure raises (the
    caller retries, and the same verdict is decided the same way again).
    """
    decision = await decide_grounded(verdict, policy, text=text)
    if decision.inconsistent:  # a contradictory verdict, decided clean: worth a line in the log
        log.info("memory %s (auditor %s): %s", memory_id, verdict.auditor, decision.reason)
    if decision.store:
        audited = AuditStamp(policy=policy_label, auditor=verdict.auditor, at=datetime.now(UTC))
        await backend.update(scope, memory_id, audit_status=decision.status, tag=decision.tag,
                             audited=audited)  # fmt: skip
    else:
        await backend.delete(scope, memory_id)
    return decision


async def decide_grounded(
    verdict: AuditVerdict, policy: AuditPolicy, *, text: str
) -> AuditDecision:
    """``decide(verdict, policy)`` with its tag grounded in ``text``: what ``store_verdict``
    stores, and what the audit API (``POST /v1/audits``) answers without storing it."""
    # Grounding normalises and scans up to ``grounding.SCAN_MAX_CHARS`` of pure Python:
    # off the event loop, like every CPU-bound step of the write path.
    return await asyncio.to_thread(ground_decision, decide(verdict, policy), text)


def ground_decision(decision: AuditDecision, text: str) -> AuditDecision:
    """``decision`` with its tag grounded in ``text`` (a tag without a domain is unchanged)."""
    if decision.tag is None or decision.tag.bias_type is None:
        return decision
    return decision.model_copy(update={"tag": ground_tag(decision.tag, text)})


def grounded_evidence(verdict: AuditVerdict, decision: AuditDecision) -> AuditVerdict:
    """``verdict`` as the trail keeps it: a grounded tag's group, tendency and rationale
    replace the judge's, so the judge's ungrounded words are not kept for display."""
    tag = decision.tag
    if tag is None or tag.grounding is None:
        return verdict
    return verdict.model_copy(update={"target_group": tag.target_group,
                                      "tendency": tag.tendency, "rationale": tag.rationale})  # fmt: skip


async def record_verdict(
    trail: Trail, user: str, memory_id: str, verdict: AuditVerdict, decision: AuditDecision,
    policy: AuditPolicy, *, before_status: str | None = "pending",
) -> TrailEvent:  # fmt: skip
    """Append the machine event of ``decision`` on ``memory_id``, its verdict as evidence."""
    domain = decision.tag.bias_type if decision.tag is not None else None
    tau = policy.tau_for(domain) if domain is not None else policy.tau
    grounded = decision.tag.grounding if decision.tag is not None else None
    evidence = {
        "verdict": grounded_evidence(verdict, decision).model_dump(mode="json"),
        "decision": {"status": decision.status.value, "reason": decision.reason, "tau": tau,
                     "stored": decision.store},
    }  # fmt: skip
    if grounded is not None:
        evidence["grounding"] = grounded.model_dump(mode="json")
    after = decision.status.value if decision.store else "dropped"
    return await trail.append(machine_event(
        memory_id, user, auditor=verdict.auditor, after_status=after, after_domain=domain,
        reason=decision.reason, evidence=evidence, before_status=before_status,
    ))  # fmt: skip
