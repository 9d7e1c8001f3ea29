"""Audit memories that were written without an audit (before the proxy, or with mode off).

``dmt-proxy audit-backfill`` (``backfill_store``) opens the memory store directly,
so the proxy must not be running on the same state directory (Qdrant's local mode
allows one client). It opens the store, the models and the auditor exactly as the
app does (``open_upstream``, ``open_policy_backend``, ``build_audit_pipeline``), so the
policy's backend options pick the same store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

from dmt_proxy.audit.protocol import Auditor, AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate
from dmt_proxy.audit.stages import build_audit_pipeline
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.registry import open_policy_backend
from dmt_proxy.policy import AuditPolicy, Policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.upstream.base import ChatModel
from dmt_proxy.upstream.factory import open_upstream

DEFAULT_STATUSES = frozenset({AuditStatus.UNAUDITED, AuditStatus.FAILED})


class BackfillReport(BaseModel):
    """What a backfill did, by resulting status."""

    examined: int = 0
    audited: int = 0
    outcomes: dict[str, int] = Field(default_factory=dict)
    dropped: int = 0
    unavailable: int = 0
    """Records left as they were because the auditor could not be reached."""


async def backfill(
    backend: MemoryBackend,
    auditor: Auditor,
    policy: AuditPolicy,
    users: Iterable[str],
    *,
    statuses: frozenset[AuditStatus] = DEFAULT_STATUSES,
    progress: Callable[[str], None] = lambda _m: None,
) -> BackfillReport:
    """Audit every record of ``users`` whose status is in ``statuses`` and store the result."""
    report = BackfillReport()
    outcomes: Counter[str] = Counter()
    for user in users:
        records = await backend.list(Scope(user=user))
        for record in records:
            report.examined += 1
            if record.audit_status not in statuses:
                continue
            candidate = AuditCandidate(text=record.query or record.text, candidate_id=record.id)
            try:
                verdict = await auditor.audit(candidate)
            except AuditorUnavailable as exc:
                report.unavailable += 1
                progress(
                    f"{record.id}: auditor unavailable ({exc.message}); left as {record.audit_status.value}"
                )
                continue
            decision = verdict.decide(policy)
            if not decision.store:
                await backend.delete(record.scope, record.id)
                report.dropped += 1
            else:
                await backend.update(
                    record.scope, record.id, audit_status=decision.status, tag=decision.tag
                )
            report.audited += 1
            outcomes[decision.status.value] += 1
            progress(f"{record.id} ({user}): {decision.status.value} - {decision.reason}")
    report.outcomes = dict(outcomes)
    return report


async def backfill_store(
    settings: Settings,
    policy: Policy,
    users: Iterable[str] = (),
    *,
    statuses: frozenset[AuditStatus] = DEFAULT_STATUSES,
    chat: ChatModel | None = None,
    progress: Callable[[str], None] = lambda _m: None,
) -> BackfillReport:
    """Backfill the policy's store with the policy's auditor (every user when ``users`` is empty).

    ``chat`` replaces the production chat model, as in ``create_app``.
    """
    upstream = await open_upstream(settings, policy, chat=chat)
    try:
        try:
            backend = await open_policy_backend(settings, policy, upstream.registry, upstream.chat)
        except ConfigError:
            raise
        except Exception as exc:
            raise ConfigError(
                f"cannot open the {policy.memory.backend} store under {settings.state_dir}: "
                f"{exc}. Is a proxy running on this state directory? Stop it first."
            ) from exc
        try:
            chosen = list(users) or await _all_users(backend, policy.memory.backend)
            auditor = build_audit_pipeline(policy, upstream.registry, upstream.chat)
            return await backfill(backend, auditor, policy.audit, chosen, statuses=statuses,
                                  progress=progress)  # fmt: skip
        finally:
            await backend.close()
    finally:
        await upstream.aclose()


async def _all_users(backend: MemoryBackend, name: str) -> list[str]:
    lister = getattr(backend, "users", None)
    if lister is None:
        raise ConfigError(f"the {name} backend cannot list users: pass --user")
    return list(await lister())
