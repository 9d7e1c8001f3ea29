"""Human review of the auditor's verdicts: the queue, a memory's evidence, and human verdicts.

``ReviewService`` is what the review API and the console call (no HTTP here). A
reviewer's action (confirm, clear, change domain, quarantine, release, re-audit,
delete) becomes the memory's status and tag in the backend at once, so the next
retrieval shows it, and an event in the append-only review trail
(``dmt_proxy.memory.write.trail``: reviewer, time, before -> after, reason). The
human verdict then holds: the worker and ``audit-backfill`` store no machine
verdict over it until a reviewer asks for a re-audit.

Ordering of the queue (most useful minute first): ``uncertainty`` is the larger of
how close P(biased) is to τ (``1 - |p - τ| / max(τ, 1 - τ)``: 1 at τ, 0 at the far
end) and how much the two judges disagree (``|p_llm - p_first_stage|``); a failed
audit (no verdict at all) is 1.

Tenancy: a ``Reviewer`` with a tenant sees only that tenant's users (``tenant/user``,
``dmt_proxy.api.auth.scoped_user``); a memory outside it is answered as absent, never
as forbidden, so its existence does not leak.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dmt_proxy.audit.protocol import Auditor, AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.domains import BiasType
from dmt_proxy.errors import NotFound, RequestError
from dmt_proxy.memory.base import MemoryBackend, MemoryRecord, Scope
from dmt_proxy.memory.entry import MemoryEntry, ReviewedEntry
from dmt_proxy.memory.render import render_memories
from dmt_proxy.memory.write.outbox import Outbox
from dmt_proxy.memory.write.trail import (
    MACHINE,
    REAUDIT,
    Trail,
    TrailEvent,
    is_held,
    now_utc,
    since_days,
)
from dmt_proxy.memory.write.verdicts import record_verdict, store_verdict
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import Policy
from dmt_proxy.provenance import AuditStamp
from dmt_proxy.tags import AuditStatus, BiasTag, Finding, FindingKind

log = logging.getLogger(__name__)

DIRECTIONS = ("upheld", "untagged", "tagged", "domain", "none")
"""What a human verdict did to the auditor's (``dmt_reviews_total{direction}``): kept it,
removed a bias tag (a false positive), added one (a miss or a failed audit), moved it
to another domain; ``none`` for a re-audit or a deletion."""

QUEUE_STATUSES = frozenset({"tagged", "disputed", "failed", "quarantined"})
"""Machine outcomes a reviewer is asked about (and, whatever the status, manipulation)."""
EXCERPT_CHARS = 300


class ReviewAction(str, Enum):
    """What a reviewer can do to a memory."""

    CONFIRM = "confirm"
    CLEAR = "clear"
    CHANGE_DOMAIN = "change_domain"
    QUARANTINE = "quarantine"
    RELEASE = "release"
    REAUDIT = "reaudit"
    DELETE = "delete"


class ReviewRequest(BaseModel):
    """A reviewer's verdict on one memory (the body of ``POST /v1/memories/{id}/review``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    action: ReviewAction
    reason: str = Field(default="", max_length=2000)
    domain: BiasType | None = None
    """The bias domain: required by ``change_domain``, and by confirm or quarantine of a
    memory without one."""


class Reviewer(BaseModel):
    """Who reviews: a name for the trail and the tenant they may see (``None``: all)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=100)
    tenant: str | None = None

    @property
    def prefix(self) -> str | None:
        """The user-id prefix of this reviewer's tenant (``None``: every user)."""
        return None if self.tenant is None else f"{self.tenant}/"

    def sees(self, user: str) -> bool:
        """Whether this reviewer may see ``user``'s memories."""
        return self.prefix is None or user.startswith(self.prefix)

    def scoped(self, user: str) -> str:
        """``user`` as a full user id: a tenant reviewer names users inside their tenant."""
        prefix = self.prefix
        return user if prefix is None or user.startswith(prefix) else prefix + user


class QueueFilter(BaseModel):
    """Narrows the review queue; every field optional."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    domain: str | None = None
    status: str | None = None
    user: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = Field(default=100, ge=1, le=1000)


class Evidence(BaseModel):
    """Why the machine decided as it did: both judges, P(biased), τ, domains, findings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    auditor: str = ""
    verdict_status: str = "ok"
    p_biased: float | None = None
    """The score the decision used (the two judges' fused probability when both judged)."""
    llm_score: float | None = None
    first_stage_score: float | None = None
    tau: float | None = None
    domain_probs: dict[str, float] = Field(default_factory=dict)
    first_stage_domain_probs: dict[str, float] = Field(default_factory=dict)
    bias_type: str | None = None
    target_group: str = ""
    tendency: str = ""
    rationale: str = ""
    findings: tuple[Finding, ...] = ()
    decision_reason: str = ""
    failure_reason: str | None = None

    @classmethod
    def of(cls, event: TrailEvent) -> Evidence | None:
        """The evidence of a machine event (``None`` for a human one)."""
        if event.evidence is None:
            return None
        verdict = AuditVerdict.model_validate(event.evidence.get("verdict", {}))
        decision: dict[str, Any] = event.evidence.get("decision", {})
        fs = verdict.first_stage
        return cls(
            auditor=verdict.auditor, verdict_status=verdict.status.value,
            p_biased=verdict.score if verdict.ok else None,
            llm_score=verdict.llm_score if verdict.llm_score is not None else (
                verdict.score if verdict.ok else None),
            first_stage_score=fs.score if fs else None, tau=decision.get("tau"),
            domain_probs=verdict.domain_probs or {},
            first_stage_domain_probs=fs.domain_probs if fs else {},
            bias_type=verdict.bias_type, target_group=verdict.target_group,
            tendency=verdict.tendency, rationale=verdict.rationale, findings=verdict.findings,
            decision_reason=str(decision.get("reason", "")),
            failure_reason=verdict.failure_reason,
        )  # fmt: skip

    @property
    def manipulation(self) -> bool:
        """Whether normalisation flagged a manipulation attempt."""
        return any(f.kind is FindingKind.MANIPULATION for f in self.findings)

    @property
    def uncertainty(self) -> float:
        """The queue's order key (module docstring): 1 most uncertain, 0 least."""
        if self.verdict_status != "ok" or self.p_biased is None:
            return 1.0
        tau = 0.5 if self.tau is None else self.tau
        closeness = max(0.0, 1.0 - abs(self.p_biased - tau) / max(tau, 1.0 - tau))
        disagreement = 0.0
        if self.first_stage_score is not None and self.llm_score is not None:
            disagreement = abs(self.llm_score - self.first_stage_score)
        return round(max(closeness, disagreement), 4)


class QueueItem(BaseModel):
    """A memory waiting for a reviewer, with what orders it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    user: str
    excerpt: str
    created_at: datetime
    audited_at: datetime
    audit_status: AuditStatus
    domain: str | None = None
    manipulation: bool = False
    uncertainty: float
    evidence: Evidence | None = None


class ModeView(BaseModel):
    """How a memory reaches the agent in one mode: the rendered block, or not at all."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: str
    shown: bool
    block: str = ""
    note: str = ""


class MemoryDetail(BaseModel):
    """Everything about one memory: the record, the evidence, the history, the views."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory: ReviewedEntry
    evidence: Evidence | None = None
    history: list[TrailEvent]
    held: bool
    views: list[ModeView]


class UserView(BaseModel):
    """What the agent remembers about one user, and the block it sees in DMT mode."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str
    memories: list[ReviewedEntry]
    block: str


class ReviewOutcome(BaseModel):
    """The answer to a review: the event stored, and the memory as it is now."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    object: str = "memory.review"
    event: TrailEvent
    memory: ReviewedEntry | None = None
    """``None`` once deleted (or dropped by a re-audit)."""


class Overview(BaseModel):
    """The console's first page: audits over time, the outbox, and the review rates."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    days: int
    audits_by_day: dict[str, dict[str, int]]
    """Day (ISO date) -> status -> machine verdicts."""
    audits_by_domain: dict[str, int]
    audits: int
    reviews: int
    outbox_depth: int
    outbox_oldest_age_s: float
    dispute_rate: float
    manipulation_rate: float
    override_rate: float
    """Human verdicts that changed the machine's status or domain, per human verdict."""


def direction(event: TrailEvent) -> str:
    """The ``direction`` of a human event (``DIRECTIONS``)."""
    if event.action in (REAUDIT, ReviewAction.DELETE.value):
        return "none"
    tagged = frozenset({"tagged", "disputed", "quarantined"})
    before, after = event.before_status in tagged, event.after_status in tagged
    if before and not after:
        return "untagged"
    if after and not before:
        return "tagged"
    if before and after and event.before_domain != event.after_domain:
        return "domain"
    return "upheld"


def _rate(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


class ReviewService:
    """The review operations over a backend, the outbox, the trail and the audit."""

    def __init__(
        self, *, backend: MemoryBackend, outbox: Outbox, trail: Trail, policy: Policy,
        auditor: Auditor | None, instruction: str, metrics: Metrics | None = None,
    ) -> None:  # fmt: skip
        self.backend = backend
        self.outbox = outbox
        self.trail = trail
        self.policy = policy
        self._policy_label = policy.label
        """Stamped on the provenance of each memory a verdict here decides."""
        self.auditor = auditor
        self.instruction = instruction
        self.metrics = metrics

    def _count(self, event: TrailEvent) -> None:
        if self.metrics is not None:
            self.metrics.reviews.labels(event.action, direction(event)).inc()

    # -- reading ------------------------------------------------------------------

    async def _record(self, memory_id: str, reviewer: Reviewer) -> MemoryRecord:
        scope = await self.backend.scope_of(memory_id)
        record = None if scope is None else await self.backend.get(scope, memory_id)
        if record is None or not reviewer.sees(record.scope.user):
            queued = [i for i in await self.outbox.pending() if i.id == memory_id]
            if queued and reviewer.sees(queued[0].exchange.scope.user):
                raise RequestError(f"Memory '{memory_id}' is still being stored; try again soon.",
                                   param="id")  # fmt: skip
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        return record

    async def queue(self, reviewer: Reviewer, flt: QueueFilter) -> list[QueueItem]:
        """Memories waiting for a human, most uncertain first."""
        items: list[QueueItem] = []
        for event in await self.trail.latest(reviewer.prefix):
            if event.human or event.action != MACHINE or not reviewer.sees(event.user):
                continue
            evidence = Evidence.of(event)
            manipulation = evidence is not None and evidence.manipulation
            if event.after_status not in QUEUE_STATUSES and not manipulation:
                continue
            if flt.domain and event.after_domain != flt.domain:
                continue
            if flt.status and event.after_status != flt.status:
                continue
            if flt.user and event.user != reviewer.scoped(flt.user):
                continue
            if (flt.since and event.at < flt.since) or (flt.until and event.at > flt.until):
                continue
            scope = Scope(user=event.user)
            record = await self.backend.get(scope, event.memory_id)
            if record is None:
                continue
            items.append(QueueItem(
                id=record.id, user=record.scope.user, excerpt=record.text[:EXCERPT_CHARS],
                created_at=record.created_at, audited_at=event.at,
                audit_status=record.audit_status, domain=event.after_domain,
                manipulation=manipulation,
                uncertainty=1.0 if evidence is None else evidence.uncertainty, evidence=evidence,
            ))  # fmt: skip
        items.sort(key=lambda i: (-i.uncertainty, i.audited_at))
        return items[: flt.limit]

    async def detail(self, memory_id: str, reviewer: Reviewer) -> MemoryDetail:
        """One memory with its evidence, history and how each mode shows it."""
        record = await self._record(memory_id, reviewer)
        history = await self.trail.history(memory_id)
        machine = [e for e in history if not e.human]
        evidence = Evidence.of(machine[-1]) if machine else None
        return MemoryDetail(memory=MemoryEntry.of(record), evidence=evidence, history=history,
                            held=is_held(history), views=self.views(record))  # fmt: skip

    def views(self, record: MemoryRecord) -> list[ModeView]:
        """The block entry each mode renders for ``record`` alone (what the agent reads)."""
        if record.quarantined:
            note = "quarantined: retrieval leaves it out in every mode"
            return [ModeView(mode=m.value, shown=False, note=note) for m in Mode]
        entry = MemoryEntry.of(record)
        return [
            ModeView(mode=m.value, shown=True, block=render_memories(
                [entry], with_tags=m.shows_tags, instruction=self.instruction,
                show_instruction=m.shows_instruction,
                with_source=self.policy.memory.show_source))
            for m in Mode
        ]  # fmt: skip

    async def user_view(self, user: str, reviewer: Reviewer) -> UserView:
        """Everything stored about ``user`` and the DMT block the agent would see."""
        full = reviewer.scoped(user)
        try:
            scope = Scope(user=full)
        except ValidationError as exc:
            raise RequestError(f"Invalid user: {exc.errors()[0]['msg']}.", param="user") from None
        records = sorted(await self.backend.list(scope), key=lambda r: (r.created_at, r.id))
        entries = [MemoryEntry.of(r) for r in records]
        shown = [e for e in entries if e.audit_status is not AuditStatus.QUARANTINED]
        block = render_memories(shown, with_tags=True, instruction=self.instruction,
                                with_source=self.policy.memory.show_source)  # fmt: skip
        return UserView(user=full, memories=entries, block=block)

    async def overview(self, reviewer: Reviewer, days: int = 14) -> Overview:
        """Audits by day, status and domain, the outbox, and the review rates."""
        events = await self.trail.events(reviewer.prefix, since_days(days))
        machine = [e for e in events if not e.human]
        humans = [e for e in events if e.human and e.action != REAUDIT]
        by_day: dict[str, Counter[str]] = {}
        for e in machine:
            by_day.setdefault(e.at.date().isoformat(), Counter())[e.after_status] += 1
        domains = Counter(e.after_domain for e in machine if e.after_domain)
        manipulated = sum(1 for e in machine if (ev := Evidence.of(e)) and ev.manipulation)
        overridden = sum(1 for e in humans if e.after_status != e.before_status
                         or e.after_domain != e.before_domain)  # fmt: skip
        depth, oldest = await self.outbox.stats()
        if reviewer.tenant is not None:  # the outbox counts every tenant's writes
            depth, oldest = 0, 0.0
        return Overview(
            days=days, audits_by_day={d: dict(c) for d, c in sorted(by_day.items())},
            audits_by_domain=dict(domains.most_common()), audits=len(machine),
            reviews=len(humans), outbox_depth=depth, outbox_oldest_age_s=round(oldest, 3),
            dispute_rate=_rate(sum(1 for e in machine if e.after_status == "disputed"),
                               len(machine)),
            manipulation_rate=_rate(manipulated, len(machine)),
            override_rate=_rate(overridden, len(humans)),
        )  # fmt: skip

    # -- human verdicts ---------------------------------------------------------------

    async def review(
        self, memory_id: str, request: ReviewRequest, reviewer: Reviewer
    ) -> ReviewOutcome:
        """Apply a reviewer's verdict: the backend first (retrieval shows it at once), then
        the trail (which holds it against later machine verdicts)."""
        record = await self._record(memory_id, reviewer)
        before = record.audit_status.value
        before_domain = record.tag.bias_type if record.tag else None
        action = request.action
        if action is ReviewAction.REAUDIT:
            return await self._reaudit(record, request, reviewer)
        after: MemoryRecord | None = None
        if action is ReviewAction.DELETE:
            await self.outbox.cancel(memory_id)
            await self.backend.delete(record.scope, memory_id)
            status, domain = "deleted", before_domain
        else:
            new_status, tag = self._decide(record, request, reviewer)
            # A human verdict decides the status now: the provenance names the reviewer.
            audited = AuditStamp(policy=self._policy_label, auditor=f"reviewer:{reviewer.name}",
                                 at=now_utc())  # fmt: skip
            after = await self.backend.update(record.scope, memory_id, audit_status=new_status,
                                              tag=tag, audited=audited)  # fmt: skip
            if after is None:
                raise NotFound(f"No memory with id '{memory_id}'.", param="id")
            status, domain = new_status.value, tag.bias_type if tag else None
        event = await self.trail.append(TrailEvent(
            memory_id=memory_id, user=record.scope.user, at=now_utc(),
            actor=f"reviewer:{reviewer.name}", human=True, action=action.value,
            before_status=before, after_status=status, before_domain=before_domain,
            after_domain=domain, reason=request.reason,
        ))  # fmt: skip
        self._count(event)
        return ReviewOutcome(event=event, memory=None if after is None else MemoryEntry.of(after))

    def _decide(
        self, record: MemoryRecord, request: ReviewRequest, reviewer: Reviewer
    ) -> tuple[AuditStatus, BiasTag | None]:
        action, status = request.action, record.audit_status
        if action is ReviewAction.CLEAR:
            return AuditStatus.CLEAN, None
        if action is ReviewAction.RELEASE:
            if status is not AuditStatus.QUARANTINED:
                raise RequestError("Only a quarantined memory can be released.", param="action")
            return AuditStatus.TAGGED, self._tag(record, request, reviewer)
        if action is ReviewAction.CHANGE_DOMAIN and request.domain is None:
            raise RequestError("change_domain needs a 'domain'.", param="domain")
        tag = self._tag(record, request, reviewer)
        if action is ReviewAction.QUARANTINE or status is AuditStatus.QUARANTINED:
            return AuditStatus.QUARANTINED, tag
        return AuditStatus.TAGGED, tag

    @staticmethod
    def _tag(record: MemoryRecord, request: ReviewRequest, reviewer: Reviewer) -> BiasTag:
        """The tag a human verdict stores: the machine's, with the reviewer's domain."""
        base = record.tag
        domain = request.domain or (base.bias_type if base else None)
        if domain is None:
            raise RequestError(
                f"{request.action.value} of a memory without a bias domain needs a 'domain'.",
                param="domain",
            )
        if base is None:
            base = BiasTag(bias_type=domain, score=1.0)
        return base.model_copy(update={"bias_type": domain, "auditor": f"reviewer:{reviewer.name}"})

    async def _reaudit(
        self, record: MemoryRecord, request: ReviewRequest, reviewer: Reviewer
    ) -> ReviewOutcome:
        """Lift any hold, then judge the memory again now and store the machine verdict."""
        if self.auditor is None:
            raise RequestError("This proxy's policy has no auditor to re-audit with.",
                               param="action")  # fmt: skip
        before = record.audit_status.value
        event = await self.trail.append(TrailEvent(
            memory_id=record.id, user=record.scope.user, at=now_utc(),
            actor=f"reviewer:{reviewer.name}", human=True, action=REAUDIT,
            before_status=before, after_status=before,
            before_domain=record.tag.bias_type if record.tag else None,
            after_domain=record.tag.bias_type if record.tag else None, reason=request.reason,
        ))  # fmt: skip
        self._count(event)
        said, answer = record.spoken()
        candidate = AuditCandidate(text=said, reply=answer, candidate_id=record.id)
        try:
            verdict = await self.auditor.audit(candidate)
        except AuditorUnavailable as exc:
            verdict = AuditVerdict.failed(f"auditor unavailable on re-audit: {exc.message}")
        decision = await store_verdict(self.backend, record.scope, record.id, verdict,
                                       self.policy.audit, text=candidate.text,
                                       policy_label=self._policy_label)  # fmt: skip
        await record_verdict(self.trail, record.scope.user, record.id, verdict, decision,
                             self.policy.audit, before_status=before)  # fmt: skip
        after = await self.backend.get(record.scope, record.id)
        return ReviewOutcome(event=event, memory=None if after is None else MemoryEntry.of(after))


def utc(value: datetime) -> datetime:
    """``value`` with a time zone (naive values are taken as UTC)."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
