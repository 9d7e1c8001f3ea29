"""The audit API's work: judge one text as a memory write would be judged, store nothing.

``AuditJobs`` is built once per app, in its lifespan (``app.state.audits``), around the
audit pipeline the memory service's worker judges every memory write with: the same
object (normalisation, the first stage, the policy's auditor), not a second one built
beside it. Each audit runs as a task the jobs hold, never fired and forgotten: its
outcome or its error is kept on its job and answered, and ``aclose`` cancels the ones
still running when the app stops. ``POST /v1/audits`` waits for it up to the request's
``wait`` (``dmt_proxy.api.routes_audits``).

A verdict becomes an outcome as on the write path, by the same function:
``decide_grounded`` (``dmt_proxy.memory.write.verdicts``: the policy's tau and action,
the second judge, the findings, the tag grounded in the text), so a text gets here the
status and tag a memory of it would be stored with. Nothing is written: not to the
memory store, the outbox or the review trail; and the write path's own metrics do not
count it (``dmt_audits_total`` counts memory writes; these are ``dmt_api_audits_total``).

Results live in the process that accepted them, in memory and bounded: at most
``max_pending`` audits run at once (one more is a 429), at most ``max_kept`` finished
ones are kept, each for ``ttl_s`` seconds after it finished. Behind a load balancer a
poll must reach the replica that accepted the audit (or the client waits for the verdict
in the request, ``wait``); a restart forgets every audit.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dmt_proxy import __version__
from dmt_proxy.audit.decision import AuditDecision
from dmt_proxy.audit.protocol import Auditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.audit.stages import StagedAuditor
from dmt_proxy.audit_types import (
    AuditFailure,
    AuditOutcome,
    AuditRequest,
    AuditResult,
    AuditState,
    AuditVersions,
)
from dmt_proxy.errors import NotFound, RequestError, TooManyRequests, UpstreamError
from dmt_proxy.memory.write.verdicts import decide_grounded
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Policy
from dmt_proxy.tags import TAG_FORMAT_VERSION

log = logging.getLogger(__name__)

TTL_S = 900.0
"""How long a finished audit can be polled (15 minutes)."""
MAX_KEPT = 4096
"""Finished audits kept for polling; the oldest goes first when there are more."""
MAX_PENDING = 64
"""Audits running at once; another is refused (429) until one finishes."""


@dataclass
class AuditJob:
    """One audit: its request, its tenant, and its outcome or error once it finished."""

    id: str
    tenant: str | None
    request: AuditRequest
    created_at: datetime
    task: asyncio.Task[None] | None = None
    outcome: AuditOutcome | None = None
    error: BaseException | None = None
    completed_at: datetime | None = None
    finished_at: float | None = field(default=None, repr=False)
    """When it finished, on the jobs' clock (its time to live runs from here)."""

    @property
    def finished(self) -> bool:
        return self.finished_at is not None

    def failure(self) -> AuditFailure | None:
        """The error as the audit object shows it (``None`` while pending or completed)."""
        exc = self.error
        if exc is None:
            return None
        if isinstance(exc, RequestError | UpstreamError):
            code = exc.code if isinstance(exc, RequestError) else "upstream_error"
            return AuditFailure(message=exc.message, type=exc.error_type, code=code,
                                status=exc.status_code)  # fmt: skip
        return AuditFailure(message="Internal error in dmt-proxy; see the proxy log.",
                            type="server_error", status=500)  # fmt: skip

    def result(self) -> AuditResult:
        """The audit object of this job, as the API answers it."""
        state: AuditState = (
            "pending" if not self.finished else "failed" if self.error else "completed"
        )
        req = self.request
        return AuditResult(
            id=self.id, status=state, created_at=self.created_at,
            completed_at=self.completed_at, speaker=req.speaker, channel=req.channel,
            user=req.user, domain_hint=req.domain_hint, outcome=self.outcome,
            error=self.failure(),
        )  # fmt: skip


def audit_versions(policy: Policy, auditor: Auditor | None) -> AuditVersions:
    """The versions that decide an outcome under ``policy`` with ``auditor``."""
    audit = policy.audit
    normalizer = auditor.normalizer if isinstance(auditor, StagedAuditor) else None
    return AuditVersions(
        proxy=__version__, policy=policy.name, policy_version=policy.version,
        auditor=audit.auditor, auditor_model=audit.auditor_model,
        auditor_prompt=audit.auditor_prompt, calibration=audit.calibration,
        first_stage=audit.first_stage, normalizer=normalizer, tag_format=TAG_FORMAT_VERSION,
    )  # fmt: skip


def outcome_of(
    verdict: AuditVerdict, decision: AuditDecision, versions: AuditVersions
) -> AuditOutcome:
    """What the audit object shows of a verdict and the write path's decision on it."""
    first = verdict.first_stage
    return AuditOutcome(
        audit_status=decision.status, stored=decision.store, action=decision.action,
        bias_detected=verdict.bias_detected, score=verdict.score, tag=decision.tag,
        findings=verdict.findings, manipulation=verdict.manipulation, reason=decision.reason,
        judge=verdict.auditor,
        decided_by="first_stage" if verdict.decided_by_first_stage else "auditor",
        first_stage_score=first.score if first is not None else None, versions=versions,
    )  # fmt: skip


def _now() -> datetime:
    return datetime.now(UTC)


class AuditJobs:
    """The audits of one app: started, awaited, kept a while for polling; none stored."""

    def __init__(
        self,
        auditor: Auditor | None,
        policy: Policy,
        metrics: Metrics,
        *,
        ttl_s: float = TTL_S,
        max_kept: int = MAX_KEPT,
        max_pending: int = MAX_PENDING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.auditor = auditor
        """The write path's audit pipeline (``None``: the policy turns memory off)."""
        self._policy = policy
        self._metrics = metrics
        self._versions = audit_versions(policy, auditor)
        self.ttl_s = ttl_s
        self._max_kept = max_kept
        self._max_pending = max_pending
        self._clock = clock
        self._jobs: dict[str, AuditJob] = {}
        self._finished: deque[str] = deque()
        """Finished jobs' ids in the order they finished: the order they expire in."""
        self._pending = 0

    def submit(self, request: AuditRequest, tenant: str | None) -> AuditJob:
        """Start judging ``request.text`` for ``tenant``; the job, pending."""
        if self.auditor is None:
            raise NotFound(
                "The audit API is off in this proxy: it judges with the memory write path's "
                "audit pipeline, and the policy turns memory off (memory.backend: none).",
                code="audit_api_disabled",
            )
        self._prune()
        if self._pending >= self._max_pending:
            raise TooManyRequests(
                f"{self._pending} audits are in progress, the most this proxy runs at once; "
                "retry when one has finished.",
                code="too_many_audits",
            )
        job = AuditJob(id=f"audit_{uuid.uuid4().hex}", tenant=tenant, request=request,
                       created_at=_now())  # fmt: skip
        self._jobs[job.id] = job
        self._pending += 1
        job.task = asyncio.create_task(self._run(job, self.auditor), name=f"dmt-{job.id}")
        return job

    def get(self, audit_id: str, tenant: str | None) -> AuditJob | None:
        """The job ``audit_id`` of ``tenant`` (``None``: unknown, expired or another's)."""
        self._prune()
        job = self._jobs.get(audit_id)
        return job if job is not None and job.tenant == tenant else None

    async def wait(self, job: AuditJob, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` for ``job`` to finish (the audit goes on after it)."""
        if job.task is not None and timeout_s > 0 and not job.finished:
            await asyncio.wait({job.task}, timeout=timeout_s)  # never cancels the task

    async def aclose(self) -> None:
        """Cancel the audits still running (the app is stopping)."""
        running = [j.task for j in self._jobs.values() if j.task is not None and not j.task.done()]
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, job: AuditJob, auditor: Auditor) -> None:
        # The candidate a memory write of this text is judged as (the worker's, for a
        # memory written as one text: POST /v1/memories, MCP's add_memory).
        candidate = AuditCandidate(text=job.request.text, candidate_id=job.id)
        label: str | None = None  # the metric's outcome; a cancelled audit is not counted
        try:
            verdict = await auditor.audit(candidate)
            decision = await decide_grounded(verdict, self._policy.audit, text=candidate.text)
            job.outcome = outcome_of(verdict, decision, self._versions)
            label = decision.outcome
        except UpstreamError as exc:  # AuditorUnavailable: the auditor model failed
            log.warning("audit %s: the auditor is unavailable: %s", job.id, exc.message)
            job.error, label = exc, "unavailable"
        except Exception as exc:  # a bug: kept on the job and answered as a 500, never lost
            log.exception("audit %s failed", job.id)
            job.error, label = exc, "failed"
        except asyncio.CancelledError as exc:  # the app is stopping
            job.error = exc
            raise
        finally:
            job.completed_at = _now()
            job.finished_at = self._clock()
            self._pending -= 1
            self._finished.append(job.id)
            if label is not None:
                self._metrics.api_audits.labels(label).inc()

    def _prune(self) -> None:
        """Forget finished jobs past their time to live, and the oldest beyond ``max_kept``."""
        now = self._clock()
        while self._finished:
            oldest = self._jobs.get(self._finished[0])
            expired = (
                oldest is None
                or oldest.finished_at is None
                or (now - oldest.finished_at >= self.ttl_s)
            )
            if not expired and len(self._finished) <= self._max_kept:
                break
            self._jobs.pop(self._finished.popleft(), None)
