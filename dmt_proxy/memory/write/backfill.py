"""Audit memories that were written without an audit (before the proxy, or with mode off).

``backfill`` re-audits the records of a store with any ``Auditor`` and stores each
decision as the outbox worker does. ``dmt-proxy audit-backfill`` runs it through
``dmt_proxy.memory.assembly.backfill_store``, which opens the store, the models and
the audit pipeline exactly as the app does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

from dmt_proxy.audit.protocol import Auditor, AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.write.trail import Trail
from dmt_proxy.memory.write.verdicts import record_verdict, store_verdict
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus

DEFAULT_STATUSES = frozenset({AuditStatus.UNAUDITED, AuditStatus.FAILED})


class BackfillReport(BaseModel):
    """What a backfill did, by resulting status."""

    examined: int = 0
    audited: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)
    dropped: int = 0
    unavailable: int = 0
    """Records left as they were because the auditor could not be reached."""
    held: int = 0
    """Records a reviewer decided (a human verdict holds them): left as they were."""


async def backfill(
    backend: MemoryBackend,
    auditor: Auditor,
    policy: AuditPolicy,
    users: Iterable[str],
    *,
    statuses: frozenset[AuditStatus] = DEFAULT_STATUSES,
    progress: Callable[[str], None] = lambda _m: None,
    trail: Trail | None = None,
    policy_label: str | None = None,
) -> BackfillReport:
    """Audit every record of ``users`` whose status is in ``statuses`` and store the result.

    With a review ``trail``, a record a reviewer decided is left alone, and each stored
    verdict is recorded there with its evidence. ``policy_label`` (``Policy.label``) is
    stamped on the provenance of each record audited (a record without one stays without).
    """
    report = BackfillReport()
    outcomes: Counter[str] = Counter()
    for user in users:
        records = await backend.list(Scope(user=user))
        for record in records:
            report.examined += 1
            if record.audit_status not in statuses:
                continue
            if trail is not None and await trail.held(record.id):
                report.held += 1
                progress(f"{record.id}: a reviewer decided it; left as {record.audit_status.value}")
                continue
            said, answer = record.spoken()
            candidate = AuditCandidate(text=said, reply=answer, candidate_id=record.id)
            try:
                verdict = await auditor.audit(candidate)
            except AuditorUnavailable as exc:
                report.unavailable += 1
                progress(
                    f"{record.id}: auditor unavailable ({exc.message}); left as {record.audit_status.value}"
                )
                continue
            decision = await store_verdict(backend, record.scope, record.id, verdict, policy,
                                           text=candidate.text, policy_label=policy_label)  # fmt: skip
            if trail is not None:
                await record_verdict(trail, user, record.id, verdict, decision, policy,
                                     before_status=record.audit_status.value)  # fmt: skip
            if not decision.store:
                report.dropped += 1
            report.audited += 1
            outcomes[decision.status.value] += 1
            progress(f"{record.id} ({user}): {decision.status.value} - {decision.reason}")
    report.outcomes = dict(outcomes)
    return report
