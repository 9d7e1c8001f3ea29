"""The deferred rationale job: a tagged memory's status is stored first, its rationale
later, never over a status someone else set since (in-memory backend, a scripted
explainer: the ``Explainer`` seam is the auditor's ``explain``)."""

from __future__ import annotations

import asyncio

from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.write.rationale import DeferredRationales
from dmt_proxy.memory.write.verdicts import store_verdict
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus

SCOPE = Scope(user="alice")
CANDIDATE = AuditCandidate(text="Old people can't learn computers.")
VERDICT = AuditVerdict(bias_detected=True, bias_type="age", score=0.9, rationale="P(biased) 0.90")


class SlowExplainer:
    """Explains after ``gate`` opens, so a test can look at the memory in between."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.calls = 0

    async def explain(self, candidate: AuditCandidate, verdict: AuditVerdict) -> AuditVerdict:
        self.calls += 1
        await self.gate.wait()
        return verdict.model_copy(update={
            "target_group": "older people", "tendency": "against older people",
            "rationale": "'Old people can't learn computers' generalizes about age."})  # fmt: skip


async def _stored(backend: InMemoryBackend) -> str:
    record = await backend.write(SCOPE, MemoryRecord(scope=SCOPE, text=CANDIDATE.text))
    return record.id


async def test_the_status_is_stored_before_the_rationale_and_the_rationale_follows() -> None:
    backend, explainer = InMemoryBackend(), SlowExplainer()
    memory_id = await _stored(backend)
    decision = await store_verdict(
        backend, SCOPE, memory_id, VERDICT, AuditPolicy(), text=CANDIDATE.text
    )
    job = DeferredRationales(explainer, backend)
    assert job.submit(SCOPE, memory_id, CANDIDATE, VERDICT, decision)
    await asyncio.sleep(0)
    before = await backend.get(SCOPE, memory_id)
    assert before is not None and before.audit_status is AuditStatus.TAGGED
    assert before.tag is not None and before.tag.rationale == ""  # status first
    explainer.gate.set()
    await job.drain()
    after = await backend.get(SCOPE, memory_id)
    assert after is not None and after.tag is not None and after.audit_status is AuditStatus.TAGGED
    # Grounded like every stored tag: the group is the text's own span, and the rationale
    # is kept because it names that group.
    assert after.tag.target_group == "Old people" and "generalizes" in after.tag.rationale
    assert after.tag.grounding is not None and after.tag.grounding.rationale == "kept"
    assert job.written == 1


async def test_a_status_changed_meanwhile_is_kept_and_clean_memories_get_no_job() -> None:
    backend, explainer = InMemoryBackend(), SlowExplainer()
    memory_id = await _stored(backend)
    decision = await store_verdict(
        backend, SCOPE, memory_id, VERDICT, AuditPolicy(), text=CANDIDATE.text
    )
    job = DeferredRationales(explainer, backend)
    job.submit(SCOPE, memory_id, CANDIDATE, VERDICT, decision)
    await backend.update(SCOPE, memory_id, audit_status=AuditStatus.CLEAN, tag=None)  # a reviewer
    explainer.gate.set()
    await job.drain()
    record = await backend.get(SCOPE, memory_id)
    assert record is not None and record.audit_status is AuditStatus.CLEAN and record.tag is None
    clean = AuditVerdict.clean()
    assert not job.submit(SCOPE, memory_id, CANDIDATE, clean, decide(clean, AuditPolicy()))


async def test_a_slow_rationale_is_given_up_after_its_budget() -> None:
    backend, explainer = InMemoryBackend(), SlowExplainer()  # the gate never opens
    memory_id = await _stored(backend)
    decision = await store_verdict(
        backend, SCOPE, memory_id, VERDICT, AuditPolicy(), text=CANDIDATE.text
    )
    job = DeferredRationales(explainer, backend, timeout_s=0.05)
    job.submit(SCOPE, memory_id, CANDIDATE, VERDICT, decision)
    await job.drain()
    assert job.skipped == 1 and job.written == 0
    await job.close()


class InventingExplainer:
    """Explains with a rationale about a group the memory never names."""

    async def explain(self, candidate: AuditCandidate, verdict: AuditVerdict) -> AuditVerdict:
        return verdict.model_copy(update={
            "target_group": "farmers", "tendency": "farmers work harder",
            "rationale": "Studies show people who grew up on farms work harder."})  # fmt: skip


async def test_a_deferred_rationale_that_names_no_group_of_the_text_is_dropped() -> None:
    backend = InMemoryBackend()
    memory_id = await _stored(backend)
    decision = await store_verdict(
        backend, SCOPE, memory_id, VERDICT, AuditPolicy(), text=CANDIDATE.text
    )
    job = DeferredRationales(InventingExplainer(), backend)
    job.submit(SCOPE, memory_id, CANDIDATE, VERDICT, decision)
    await job.drain()
    after = await backend.get(SCOPE, memory_id)
    assert after is not None and after.tag is not None
    assert after.tag.target_group == "Old people" and after.tag.rationale == ""
    assert after.tag.grounding is not None and after.tag.grounding.rationale == "dropped"
