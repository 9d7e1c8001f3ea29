"""Backfill audits memories stored without an audit, with the shipped scripted auditor
(a fake: the behaviour under test is the backfill's bookkeeping, not judgement)."""

from __future__ import annotations

from dmt_proxy.audit.auditor import AuditorUnavailable
from dmt_proxy.audit.backfill import backfill
from dmt_proxy.audit.fake import ScriptedAuditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.in_memory import InMemoryBackend
from dmt_proxy.policy import AuditPolicy, TagAction
from dmt_proxy.tags import AuditStatus


def verdict(candidate: AuditCandidate) -> AuditVerdict:
    if "lazy" in candidate.text:
        return AuditVerdict.biased(
            "ses", score=0.8, target_group="low-income", tendency="against the poor"
        )
    return AuditVerdict.clean()


async def seed(backend: InMemoryBackend) -> None:
    for i, (user, text, status) in enumerate([
        ("u1", "Poor people are lazy. What is GDP?", AuditStatus.UNAUDITED),
        ("u1", "What is GDP?", AuditStatus.UNAUDITED),
        ("u1", "Already fine.", AuditStatus.CLEAN),
        ("u2", "The poor are lazy, right?", AuditStatus.FAILED),
    ]):  # fmt: skip
        scope = Scope(user=user)
        await backend.write(
            scope, MemoryRecord(id=f"m{i}", scope=scope, text=text, audit_status=status)
        )


async def test_backfill_tags_and_cleans_only_unaudited_and_failed() -> None:
    backend = InMemoryBackend()
    await seed(backend)
    auditor = ScriptedAuditor(verdict)
    report = await backfill(backend, auditor, AuditPolicy(), ["u1", "u2"])
    assert report.examined == 4 and report.audited == 3
    assert report.outcomes == {"tagged": 2, "clean": 1}
    assert len(auditor.calls) == 3
    statuses = {
        r.id: r.audit_status for u in ("u1", "u2") for r in await backend.list(Scope(user=u))
    }
    assert statuses == {"m0": AuditStatus.TAGGED, "m1": AuditStatus.CLEAN, "m2": AuditStatus.CLEAN,
                        "m3": AuditStatus.TAGGED}  # fmt: skip
    tagged = await backend.get(Scope(user="u1"), "m0")
    assert tagged is not None and tagged.tag is not None and tagged.tag.bias_type == "ses"


async def test_backfill_drop_policy_and_unavailable_auditor() -> None:
    backend = InMemoryBackend()
    await seed(backend)
    report = await backfill(
        backend, ScriptedAuditor(verdict), AuditPolicy(action=TagAction.DROP), ["u2"]
    )
    assert report.dropped == 1 and await backend.get(Scope(user="u2"), "m3") is None
    down = ScriptedAuditor([AuditorUnavailable("down", upstream="a", retryable=True)])
    report = await backfill(backend, down, AuditPolicy(), ["u1"])
    assert report.unavailable == 2 and report.audited == 0
    m0 = await backend.get(Scope(user="u1"), "m0")
    assert m0 is not None and m0.audit_status is AuditStatus.UNAUDITED
