"""Storing a verdict: the one place a verdict becomes a memory's status and tag.

``decide(verdict, policy)`` (``dmt_proxy.audit.decision``) is called here and nowhere else on the write path:
the outbox worker and ``audit-backfill`` both hand a verdict to ``store_verdict``,
which decides once and updates (or, for a dropped memory, deletes) the stored
record. The caller counts what the decision says (the worker's metrics); the
auditor that produced the verdict neither decides nor counts.
"""

from __future__ import annotations

import logging

from dmt_proxy.audit.decision import AuditDecision, decide
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.policy import AuditPolicy

log = logging.getLogger(__name__)


async def store_verdict(
    backend: MemoryBackend, scope: Scope, memory_id: str, verdict: AuditVerdict,
    policy: AuditPolicy,
) -> AuditDecision:  # fmt: skip
    """Decide ``verdict`` under ``policy`` and store the decision on memory ``memory_id``.

    Returns the decision once the backend has it; a backend failure raises (the
    caller retries, and the same verdict is decided the same way again).
    """
    decision = decide(verdict, policy)
    if decision.inconsistent:  # a contradictory verdict, decided clean: worth a line in the log
        log.info("memory %s (auditor %s): %s", memory_id, verdict.auditor, decision.reason)
    if decision.store:
        await backend.update(scope, memory_id, audit_status=decision.status, tag=decision.tag)
    else:
        await backend.delete(scope, memory_id)
    return decision
