"""The write-behind worker: outbox -> memory backend (pending) -> auditor -> tag.

The auditor is the whole audit pipeline (``audit.stages.StagedAuditor``: normalisation,
first stage, LLM auditor); the worker only schedules, retries and stores.

Each outbox row goes through two durable steps, so a crash at any point repeats
at most the step it was in:

1. the record is written to the backend under its final id with status
   ``pending`` (DMT modes) or ``unaudited`` (no DMT), and the row is marked stored;
2. in DMT modes the auditor judges it; the verdict is saved on the row, the
   policy decides (tag, quarantine, drop, clean or failed: ``store_verdict``, the
   one place a verdict is decided) and the record is updated; then the row is
   deleted, and the audit is counted (here, once per memory, whatever the auditor).
   A tagged memory's rationale is written afterwards by a deferred job with its
   own budget (``memory.write.rationale``): it never delays a status.

A row that is gone when the worker comes to mark it stored or to save its verdict was
cancelled meanwhile (its memory deleted, its user erased): the worker deletes what it
stored of it and stops there, so no record and no trail event of it lands after the
deletion. An erasure in this process also stops the user's rows in progress at once
(``abandon``) before it deletes what they stored.

Backend failures retry forever with capped exponential backoff: an acknowledged
write is never given up. A verdict whose save fails because the outbox database is
unreachable is kept by the worker and saved when the database answers again (the
row stays leased to this worker meanwhile), so a live worker never audits the same
memory twice; only a worker that dies between the audit and the save, or a save
that waits longer than the row's lease, leaves the audit to be repeated.

Outages are expected: a call that fails for an unreachable database logs one
warning naming the cause, never a traceback; a traceback means a bug. An auditor that stays unreachable for
``audit.max_attempts`` tries leaves the memory ``failed`` (visible, re-auditable
with ``dmt-proxy audit-backfill``), never ``clean``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import cast

from dmt_proxy.audit.decision import AuditDecision
from dmt_proxy.audit.protocol import Auditor, AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.circuit import describe, is_outage
from dmt_proxy.memory.write.outbox import Outbox, OutboxItem
from dmt_proxy.memory.write.rationale import DeferredRationales, Explainer
from dmt_proxy.memory.write.trail import Trail
from dmt_proxy.memory.write.verdicts import record_verdict, store_verdict
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus, FindingKind

log = logging.getLogger(__name__)


def backoff_s(attempts: int, *, base: float = 0.5, cap: float = 60.0) -> float:
    """Delay before retry number ``attempts + 1``: 0.5 s doubling, capped at a minute."""
    return float(min(cap, base * (2 ** min(attempts, 20))))


def _candidate(item: OutboxItem) -> AuditCandidate:
    """What the auditor is shown of ``item``: the user's words, with the reply beside them."""
    exchange = item.exchange
    return AuditCandidate(text=exchange.query, reply=exchange.answer, candidate_id=item.id)


class OutboxWorker:
    """Drains the outbox in the background of the proxy process."""

    def __init__(
        self,
        *,
        outbox: Outbox,
        backend: MemoryBackend,
        backend_name: str,
        auditor: Auditor | None,
        policy: AuditPolicy,
        metrics: Metrics,
        concurrency: int = 2,
        idle_poll_s: float = 0.25,
        trail: Trail | None = None,
        policy_label: str | None = None,
    ) -> None:
        self.outbox = outbox
        self.policy_label = policy_label
        """The policy's name and fingerprint (``Policy.label``), stamped on every memory this
        worker audits (``None``: a worker built without its policy, as tests do)."""
        self.trail = trail
        """Where verdicts are recorded with their evidence, and human verdicts hold."""
        self.backend = backend
        self.backend_name = backend_name
        self.auditor = auditor
        self.policy = policy
        self.metrics = metrics
        self.concurrency = concurrency
        self.idle_poll_s = idle_poll_s
        self.save_retry_s = 0.25
        """First delay before saving a kept verdict again (doubling, capped at 5 s)."""
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._in_flight: set[str] = set()
        self._users: dict[str, tuple[str, asyncio.Task[None]]] = {}
        """Row id -> (user, task) of the rows in progress: what ``abandon`` stops."""
        self._running: set[asyncio.Task[None]] = set()
        """The rows being processed: ``stop`` cancels them before the outbox is closed."""
        self.rationales: DeferredRationales | None = None
        """The deferred rationale job (``policy.rationale`` and an auditor that explains):
        a tagged memory's rationale is written after its status is stored, never before."""
        if policy.rationale and auditor is not None and hasattr(auditor, "explain"):
            self.rationales = DeferredRationales(cast(Explainer, auditor), backend)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="dmt-outbox-worker")

    def wake(self) -> None:
        """A new row was enqueued: look now instead of at the next poll."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop claiming rows and cancel the ones in progress. A cancelled row stays in the
        outbox, as after a crash: it is claimed again (its lease runs out) and repeats at
        most the step it was in. Left running, it would meet the closed outbox."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        running = list(self._running)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        if self.rationales is not None:
            await self.rationales.close()

    async def _run(self) -> None:
        sem = asyncio.Semaphore(self.concurrency)
        running = self._running
        gauges_at = 0.0
        poll_failures = 0
        while True:
            async with sem:  # a free slot first: claim only rows that can start now
                pass
            try:
                # A shared outbox leases what it hands out: rows claimed here but left
                # waiting would be held from idle workers elsewhere.
                free = max(1, self.concurrency - len(self._in_flight))
                items = [i for i in await self.outbox.due(free) if i.id not in self._in_flight]
                if not items or time.monotonic() - gauges_at >= self.idle_poll_s:
                    gauges_at = time.monotonic()
                    await self.refresh_gauges()
            except Exception as exc:  # e.g. the outbox database is down: back off, keep trying
                poll_failures += 1
                if not is_outage(exc):
                    log.exception("outbox poll failed (%d in a row)", poll_failures)
                elif poll_failures == 1:  # one line per outage; the retries are expected
                    log.warning("outbox poll failed (%s); retrying with backoff", describe(exc))
                await asyncio.sleep(backoff_s(poll_failures - 1, base=0.25, cap=5.0))
                items = []
            else:
                if poll_failures:
                    log.info("outbox poll works again after %d failed tries", poll_failures)
                poll_failures = 0
            for item in items:
                await sem.acquire()
                self._in_flight.add(item.id)
                task = asyncio.create_task(self._guarded(item, sem))
                self._users[item.id] = (item.exchange.scope.user, task)
                running.add(task)
                task.add_done_callback(running.discard)
            if not items:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.idle_poll_s):
                        await self._wake.wait()

    async def _guarded(self, item: OutboxItem, sem: asyncio.Semaphore) -> None:
        try:
            await self.process(item)
        except Exception as exc:  # a bug here must not kill the worker or lose the row
            if is_outage(exc):  # the database went away mid-row: expected, and recovered
                log.warning("outbox item %s interrupted: database unreachable (%s); it is "
                            "rescheduled, or claimed again once its lease runs out",
                            item.id, describe(exc))  # fmt: skip
                # Even when this fails too, it releases the row here: a row left among those
                # in progress would have its lease renewed forever and never be claimed again.
                with contextlib.suppress(Exception):
                    await self.outbox.retry_later(
                        item.id, f"database unreachable: {describe(exc)}", backoff_s(item.attempts)
                    )
                return
            log.exception("outbox item %s failed unexpectedly", item.id)
            with contextlib.suppress(Exception):
                await self.outbox.retry_later(
                    item.id, f"unexpected: {exc!r}", backoff_s(item.attempts)
                )
        finally:
            self._in_flight.discard(item.id)
            self._users.pop(item.id, None)
            sem.release()

    async def abandon(self, user: str) -> int:
        """Stop the rows of ``user`` in progress here and wait until they have stopped (an
        erasure, after it cancelled their rows: nothing of them may be stored later); how
        many. A blocking store call already running in a thread finishes first: the
        backend's own lock orders it before the erasure's."""
        tasks = [task for owner, task in self._users.values() if owner == user]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return len(tasks)

    async def refresh_gauges(self) -> None:
        depth, oldest = await self.outbox.stats()
        self.metrics.outbox_depth.set(depth)
        self.metrics.outbox_oldest_age.set(oldest)

    async def process(self, item: OutboxItem) -> None:
        """Move one row forward as far as it can go now."""
        mode, scope = item.exchange.mode, item.exchange.scope
        if not item.stored:
            record = item.record(
                AuditStatus.PENDING if mode.audits_writes else AuditStatus.UNAUDITED
            )
            try:
                await self.backend.write(scope, record)
            except Exception as exc:
                self.metrics.memory_writes.labels(self.backend_name, "retried").inc()
                await self._reschedule(item, "backend write", exc)
                return
            self.metrics.memory_writes.labels(self.backend_name, "stored").inc()
            if await self.outbox.mark_stored(item.id) is False:
                await self._cancelled(item, scope)
                return
        if not mode.audits_writes or self.auditor is None:
            await self.outbox.done(item.id)
            return
        if await self._held(item):
            return
        verdict = AuditVerdict.model_validate(item.verdict) if item.verdict else None
        if verdict is None:
            verdict = await self._audit(item)
            if verdict is None:
                return  # rescheduled
            if not await self._keep_verdict(item, verdict):
                await self._cancelled(item, scope)
                return
        await self._apply(item, scope, verdict)

    async def _cancelled(self, item: OutboxItem, scope: Scope) -> None:
        """The row was cancelled while it was in progress: undo what was stored of it."""
        log.info("outbox row %s was cancelled while in progress; its record is removed", item.id)
        await self.backend.delete(scope, item.id)

    async def _reschedule(self, item: OutboxItem, what: str, exc: Exception) -> None:
        """Schedule another try after ``what`` failed with ``exc``; one log line says why."""
        try:
            await self.outbox.retry_later(item.id, f"{what}: {exc}", backoff_s(item.attempts))
        except Exception as lost:
            if not is_outage(lost):
                raise
            log.warning("%s of %s failed (%s) and the outbox database is unreachable (%s); its "
                        "row is claimed again once its lease runs out", what, item.id,
                        describe(exc), describe(lost))  # fmt: skip
            return
        log.warning("%s of %s failed, will retry: %s", what, item.id, describe(exc))

    async def _keep_verdict(self, item: OutboxItem, verdict: AuditVerdict) -> bool:
        """Save ``verdict`` on the row; while the outbox database is unreachable, hold it
        here and try again, so the memory is never audited twice by this live worker.
        False when the row is gone (cancelled while it was audited)."""
        failures = 0
        while True:
            try:
                saved = await self.outbox.save_verdict(item.id, verdict.model_dump(mode="json"))
            except Exception as exc:
                if not is_outage(exc):
                    raise
                failures += 1
                if failures == 1:
                    log.warning("verdict on %s kept until the outbox database answers (%s)",
                                item.id, describe(exc))  # fmt: skip
                await asyncio.sleep(backoff_s(failures - 1, base=self.save_retry_s, cap=5.0))
                continue
            if failures:
                log.info("verdict on %s saved after %d failed tries", item.id, failures)
            return saved is not False  # an outbox that reports nothing: the row is there

    async def _audit(self, item: OutboxItem) -> AuditVerdict | None:
        # The reply travels with the candidate: the trained judge scores the assistant's words
        # apart (who said it). The LLM is shown it only with ``include_reply``: small auditors
        # shown the reply judged the reply instead (a blatant age stereotype came back "clean"
        # from qwen2.5-1.5b with the reply attached, "age 0.8" without); the staged auditor
        # strips it.
        candidate = _candidate(item)
        assert self.auditor is not None
        started = time.perf_counter()
        try:
            return await self.auditor.audit(candidate)
        except AuditorUnavailable as exc:
            if exc.status_code == 503 and item.attempts + 1 < self.policy.max_attempts:
                await self.outbox.retry_later(
                    item.id, f"auditor: {exc.message}", backoff_s(item.attempts)
                )
                return None
            return AuditVerdict.failed(
                f"auditor unavailable after {item.attempts + 1} attempt(s): {exc.message}",
                attempts=item.attempts + 1,
                latency_s=time.perf_counter() - started,
            )

    def _count(self, verdict: AuditVerdict, decision: AuditDecision) -> None:
        """Audit metrics are counted here, once per memory, whatever the auditor."""
        skipped = verdict.decided_by_first_stage
        self.metrics.audits.labels("skipped" if skipped else decision.outcome).inc()
        if verdict.attempts:
            self.metrics.audit_duration.observe(verdict.latency_s)
        tag = decision.tag
        # A disputed memory is counted as such; dmt_tags holds the auditor's tags.
        action = decision.action
        counted = decision.status is not AuditStatus.DISPUTED and action is not None
        if counted and action is not None and tag is not None and tag.bias_type is not None:
            self.metrics.tags.labels(tag.bias_type, action.value).inc()
        for rule in sorted(
            {f.rule for f in verdict.findings if f.kind is FindingKind.MANIPULATION}
        ):
            self.metrics.manipulation.labels(rule).inc()

    async def _held(self, item: OutboxItem) -> bool:
        """A reviewer already decided this memory: their verdict stands, the row is done."""
        if self.trail is None or not await self.trail.held(item.id):
            return False
        log.info("memory %s has a human verdict; the machine audit is skipped", item.id)
        await self.outbox.done(item.id)
        return True

    async def _apply(self, item: OutboxItem, scope: Scope, verdict: AuditVerdict) -> None:
        if await self._held(item):  # a reviewer may have decided while the auditor judged
            return
        try:
            decision = await store_verdict(self.backend, scope, item.id, verdict, self.policy,
                                           text=item.exchange.query,
                                           policy_label=self.policy_label)  # fmt: skip
        except Exception as exc:
            self.metrics.memory_writes.labels(self.backend_name, "retried").inc()
            await self._reschedule(item, "backend update", exc)
            return
        if not decision.store:
            self.metrics.memory_writes.labels(self.backend_name, "dropped").inc()
        elif decision.status is AuditStatus.QUARANTINED:
            self.metrics.memory_writes.labels(self.backend_name, "quarantined").inc()
        if decision.status is AuditStatus.FAILED:
            log.warning("audit of %s failed: %s", item.id, decision.reason)
        if self.trail is not None:  # before the row goes: a crash repeats the event, never loses it
            await record_verdict(self.trail, scope.user, item.id, verdict, decision, self.policy)
        await self.outbox.done(item.id)
        self._count(verdict, decision)
        if self.rationales is not None:  # after the status is stored and the row is done
            self.rationales.submit(scope, item.id, _candidate(item), verdict, decision)


async def drain(worker: OutboxWorker, *, timeout_s: float = 600.0, poll_s: float = 0.1) -> bool:
    """Wait until the outbox is empty (True) or ``timeout_s`` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        depth, _ = await worker.outbox.stats()
        if depth == 0:
            return True
        worker.wake()
        await asyncio.sleep(poll_s)
    return False
