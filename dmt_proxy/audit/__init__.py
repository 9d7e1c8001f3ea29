"""Write-time auditing of memories (Dynamic Memory Tagging, paper §6.2).

``Auditor`` is the seam (candidate in, verdict out); ``LLMAuditor`` is the real
one (the shipped fake, ``ScriptedAuditor``, is in ``dmt_proxy.testing.auditor``);
``AuditVerdict.decide(policy)`` turns a verdict into clean / tagged / quarantined /
failed. Auditors are plugins, built by name: ``create_auditor("llm", AuditorConfig(...))``
(``dmt_proxy.audit.registry``).
The optional embedding first stage lives in ``dmt_proxy.audit.first_stage``
(imported on demand: it needs numpy).
"""

from dmt_proxy.audit.auditor import AuditorOptions, LLMAuditor
from dmt_proxy.audit.protocol import Auditor, AuditorUnavailable
from dmt_proxy.audit.registry import (
    AuditorConfig,
    create_auditor,
    known_auditors,
    register_auditor,
)
from dmt_proxy.audit.schema import AuditCandidate, AuditDecision, AuditVerdict, VerdictStatus

__all__ = [
    "AuditCandidate",
    "AuditDecision",
    "AuditVerdict",
    "Auditor",
    "AuditorConfig",
    "AuditorOptions",
    "AuditorUnavailable",
    "LLMAuditor",
    "VerdictStatus",
    "create_auditor",
    "known_auditors",
    "register_auditor",
]
