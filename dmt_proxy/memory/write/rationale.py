"""The deferred rationale: a tagged memory's explanation, written after its status.

The verdict path decides a memory's status with one-token questions; the
rationale (``target_group``, ``tendency``, a sentence that quotes the user) is
free text, the slowest turn on a CPU model (tens of tokens decoded), and it never
changes the status. So the outbox worker stores the status first and hands the
rationale to this job, which has its own budget: one rationale at a time, each
bounded by ``timeout_s``, at most ``max_pending`` waiting (more are skipped, the
tag keeps its placeholder), and none of it delays a status.

The job adds the rationale to the stored tag only while the memory still has the
status the worker stored (a reviewer's later decision is never overwritten), and
a failure (timeout, upstream error, no answer) leaves the tag as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Protocol

from dmt_proxy.audit.decision import AuditDecision
from dmt_proxy.audit.grounding import ground_tag
from dmt_proxy.audit.protocol import AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.base import MemoryBackend, Scope

log = logging.getLogger(__name__)


class Explainer(Protocol):
    """An auditor that can write the rationale of a verdict it gave (``StagedAuditor``)."""

    async def explain(self, candidate: AuditCandidate, verdict: AuditVerdict) -> AuditVerdict:
        """``verdict`` with ``target_group``, ``tendency`` and ``rationale`` filled in."""
        ...


class DeferredRationales:
    """Rationales of tagged memories, written in the background after their status."""

    def __init__(
        self, explainer: Explainer, backend: MemoryBackend, *, timeout_s: float = 60.0,
        max_pending: int = 64,
    ) -> None:  # fmt: skip
        self.explainer = explainer
        self.backend = backend
        self.timeout_s = timeout_s
        self.max_pending = max_pending
        self._one_at_a_time = asyncio.Semaphore(1)
        self._tasks: set[asyncio.Task[None]] = set()
        self.written = 0
        self.skipped = 0

    def submit(
        self, scope: Scope, memory_id: str, candidate: AuditCandidate, verdict: AuditVerdict,
        decision: AuditDecision,
    ) -> bool:  # fmt: skip
        """Queue the rationale of a stored decision that names a bias; whether it was queued."""
        tag = decision.tag
        if not decision.store or tag is None or tag.bias_type is None or not verdict.ok:
            return False
        if verdict.rationale and not verdict.rationale.startswith("P(biased)"):
            return False  # the verdict came with its own rationale
        if len(self._tasks) >= self.max_pending:
            self.skipped += 1
            return False
        task = asyncio.create_task(self._write(scope, memory_id, candidate, verdict, decision))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _write(
        self, scope: Scope, memory_id: str, candidate: AuditCandidate, verdict: AuditVerdict,
        decision: AuditDecision,
    ) -> None:  # fmt: skip
        async with self._one_at_a_time:
            try:
                async with asyncio.timeout(self.timeout_s):
                    explained = await self.explainer.explain(candidate, verdict)
            except (TimeoutError, AuditorUnavailable) as exc:
                log.info("no rationale for %s (%s); its tag is kept", memory_id, exc)
                self.skipped += 1
                return
        if explained.rationale == verdict.rationale and not explained.target_group:
            self.skipped += 1
            return
        stored = await self.backend.get(scope, memory_id)
        if stored is None or stored.audit_status is not decision.status or stored.tag is None:
            self.skipped += 1  # gone, or decided again (a reviewer): not ours to change
            return
        # Grounded like every stored tag: the judge's own group and rationale reach the agent
        # and the console only if they name a group the memory's text names.
        tag = await asyncio.to_thread(
            ground_tag,
            stored.tag.model_copy(
                update={
                    "rationale": explained.rationale[:1000],
                    "target_group": (explained.target_group or stored.tag.target_group)[:200],
                    "tendency": (explained.tendency or stored.tag.tendency)[:200],
                }
            ),
            candidate.text,
        )  # fmt: skip  (CPU-bound grounding, off the event loop)
        await self.backend.update(scope, memory_id, audit_status=decision.status, tag=tag)
        self.written += 1

    async def drain(self) -> None:
        """Wait for every queued rationale (tests, orderly shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Cancel what is still queued; a memory keeps the tag it has."""
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
