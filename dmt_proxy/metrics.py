"""Every Prometheus collector dmt-proxy exports, on one registry per app instance.

Label sets are bounded on purpose: no user ids, request ids or free-form model
names. ``model_kind`` is one of local/alias/provider; ``bias_type`` is one of
``dmt_proxy.domains.BIAS_TYPES`` (the nine DIB domains or ``other``).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from dmt_proxy.domains import BIAS_TYPES
from dmt_proxy.tags import MANIPULATION_RULES

_LATENCY_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
)
_OVERHEAD_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0)


REVIEW_ACTIONS = ("confirm", "clear", "change_domain", "quarantine", "release", "reaudit", "delete")
"""The ``action`` label of ``dmt_reviews_total``: ``dmt_proxy.memory.review.ReviewAction``."""

API_AUDIT_OUTCOMES = ("clean", "tagged", "disputed", "failed", "unavailable")
"""The ``outcome`` label of ``dmt_api_audits_total``: the write path's decision outcome
(``AuditDecision.outcome``), or ``unavailable`` when the auditor could not be reached."""


class Metrics:
    """The metrics catalogue (documented in the README, section "Metrics")."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "dmt_requests", "HTTP requests handled, by route, mitigation mode and status code.",
            ["route", "mode", "status"], registry=r,
        )  # fmt: skip
        self.request_duration = Histogram(
            "dmt_request_duration_seconds", "Wall time of a request as the client sees it.",
            ["route", "stream"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.upstream_duration = Histogram(
            "dmt_upstream_duration_seconds", "Time spent waiting for the upstream model.",
            ["model_kind", "stream"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.upstream_errors = Counter(
            "dmt_upstream_errors", "Upstream failures, by kind (error, timeout, rejected).",
            ["model_kind", "kind"], registry=r,
        )  # fmt: skip
        self.overhead = Histogram(
            "dmt_proxy_overhead_seconds", "Time spent inside the proxy, excluding the upstream.",
            ["stream"], buckets=_OVERHEAD_BUCKETS, registry=r,
        )  # fmt: skip
        self.retrieval_duration = Histogram(
            "dmt_memory_retrieval_duration_seconds", "Memory search time per request, by backend.",
            ["backend"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.memory_skipped = Counter(
            "dmt_memory_skipped", "Requests served without memory, by reason.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.memory_writes = Counter(
            "dmt_memory_writes", "Memory writes, by backend and outcome (stored, retried, failed, dropped, quarantined).",
            ["backend", "outcome"], registry=r,
        )  # fmt: skip
        self.audits = Counter(
            "dmt_audits", "Auditor verdicts, by outcome (clean, tagged, disputed, failed, skipped).",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.tags = Counter(
            "dmt_tags", "Memories whose bias score reached tau, by bias type and action taken.",
            ["bias_type", "action"], registry=r,
        )  # fmt: skip
        self.audit_duration = Histogram(
            "dmt_audit_duration_seconds", "Auditor LLM call time per memory write.",
            buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.event_loop_lag = Histogram(
            "dmt_event_loop_lag_seconds", "How late the event loop ran a timer (sampled every "
            "50 ms): time the loop spent on work that should have run elsewhere.",
            buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.outbox_depth = Gauge(
            "dmt_outbox_depth", "Memory writes acknowledged but not yet stored.", registry=r,
        )  # fmt: skip
        self.outbox_oldest_age = Gauge(
            "dmt_outbox_oldest_pending_age_seconds", "Age of the oldest pending memory write.",
            registry=r,
        )  # fmt: skip
        self.manipulation = Counter(
            "dmt_manipulation_findings", "Memory writes whose text tried to steer its own audit, by rule (the memory is tagged whatever the judges say).",
            ["rule"], registry=r,
        )  # fmt: skip
        self.database_unavailable = Counter(
            "dmt_database_unavailable", "Database calls that failed for a lost or refused connection, by component and operation; each is retried with backoff.",
            ["component", "operation"], registry=r,
        )  # fmt: skip
        self.outbox_spooled = Counter(
            "dmt_outbox_spooled", "Acknowledged writes committed to the local spool because the shared outbox database was unreachable.",
            registry=r,
        )  # fmt: skip
        self.outbox_spool_forwarded = Counter(
            "dmt_outbox_spool_forwarded", "Spooled writes forwarded to the shared outbox once its database answered again.",
            registry=r,
        )  # fmt: skip
        self.outbox_spool_depth = Gauge(
            "dmt_outbox_spool_depth", "Writes waiting in this proxy's local spool for the outbox database.",
            registry=r,
        )  # fmt: skip
        self.store_circuit_state = Gauge(
            "dmt_store_circuit_state", "The memory store's circuit breaker: 0 closed (store used), 1 open (retrieval skipped, writes spooled: the database is unreachable), 2 half-open (a probe is checking it).",
            registry=r,
        )  # fmt: skip
        self.store_circuit_opened = Counter(
            "dmt_store_circuit_opened", "Times the memory store's circuit opened because a call met a refused, lost or timed-out connection.",
            registry=r,
        )  # fmt: skip
        self.first_stage = Counter(
            "dmt_first_stage", "First-stage detector decisions (pass = sent to the LLM auditor, skip).",
            ["decision"], registry=r,
        )  # fmt: skip
        self.api_audits = Counter(
            "dmt_api_audits", "Texts judged through the audit API (POST /v1/audits), by outcome "
            "(clean, tagged, disputed, failed, unavailable); never counted in dmt_audits.",
            ["outcome"], registry=r,
        )  # fmt: skip
        self.reviews = Counter(
            "dmt_reviews", "Human verdicts on memories, by action and by what they did to the "
            "auditor's verdict (direction: upheld, untagged, tagged, domain, none).",
            ["action", "direction"], registry=r,
        )  # fmt: skip

        # Pre-create the bounded label combinations at 0: a series that first appears
        # already at 1 shows no increase() to Prometheus, so the first tag would be missed.
        for outcome in ("clean", "tagged", "disputed", "failed", "skipped"):
            self.audits.labels(outcome)
        for outcome in API_AUDIT_OUTCOMES:
            self.api_audits.labels(outcome)
        for bias_type in BIAS_TYPES:
            for action in ("tag", "quarantine", "drop"):
                self.tags.labels(bias_type, action)
        for rule in MANIPULATION_RULES:
            self.manipulation.labels(rule)
        for action in REVIEW_ACTIONS:  # memory.review's actions and directions (a test checks)
            for direction in ("upheld", "untagged", "tagged", "domain", "none"):
                self.reviews.labels(action, direction)
        for operation in ("enqueue", "forward", "worker", "admin"):
            self.database_unavailable.labels("outbox", operation)
        for decision in ("pass", "skip"):
            self.first_stage.labels(decision)
        for kind in ("local", "alias", "provider"):
            for error in ("error", "timeout", "rejected"):
                self.upstream_errors.labels(kind, error)
