"""Write-time judging of memories (Dynamic Memory Tagging, paper §6.2): a candidate in, a verdict out.

``Auditor`` (``dmt_proxy.audit.protocol``) is the seam; ``AuditCandidate``,
``AuditVerdict`` and ``decide(verdict, policy)`` (``dmt_proxy.audit.decision``) (clean / tagged / quarantined /
failed) are in ``dmt_proxy.audit.schema``. ``LLMAuditor`` (``dmt_proxy.audit.auditor``)
is the real auditor (the shipped fake, ``ScriptedAuditor``, is in
``dmt_proxy.testing.auditor``); ``dmt_proxy.audit.stages`` wraps any auditor in
normalisation, the optional embedding first stage (``dmt_proxy.audit.first_stage``)
and the two judges' fusion. Auditors are plugins, built by name:
``create_auditor("llm", AuditorConfig(...))`` (``dmt_proxy.audit.registry``).

Storing a verdict is the memory write path's job (``dmt_proxy.memory.write``).
Importing this package imports none of its modules.
"""
