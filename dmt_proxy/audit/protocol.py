"""The judging seam: an ``Auditor`` turns a candidate into a verdict.

Everything that judges memories implements ``Auditor`` (the LLM auditor, the staged
pipeline around it, the shipped ``ScriptedAuditor``, outside plugins), and everything
that has memories judged (the outbox worker and ``audit-backfill`` in
``dmt_proxy.memory.write``, the auditor evaluation) depends on this module and on the
candidate and verdict types of ``dmt_proxy.audit.schema``, never on an implementation.
"""

from __future__ import annotations

from typing import Protocol

from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.errors import UpstreamError


class Auditor(Protocol):
    """Anything that turns a memory write into a verdict."""

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        """Judge one memory; raise ``AuditorUnavailable`` only when the upstream failed."""
        ...


class AuditorUnavailable(UpstreamError):
    """The auditor model could not be reached or did not answer in time."""

    error_type = "auditor_unavailable"

    def __init__(self, message: str, *, upstream: str, retryable: bool) -> None:
        super().__init__(message, upstream=upstream, status_code=503 if retryable else 502)
        self.retryable = retryable
        """True for timeouts, rate limits and server errors; false for a rejected request
        (bad model name, unsupported parameter): retrying that cannot help."""
