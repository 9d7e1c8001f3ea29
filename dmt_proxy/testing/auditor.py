"""A scripted auditor shipped for tests and demos. It is not a language model.

``ScriptedAuditor`` answers from a list of verdicts (or a function of the
candidate), records every candidate it receives, and can raise a given error
(e.g. ``AuditorUnavailable``) to exercise the worker's retry path; ``script()``
replaces the verdicts mid-test. Registered as the ``scripted`` auditor; built by
name it answers clean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import ClassVar

from dmt_proxy.audit.registry import AuditorConfig, ContractEnv, register_auditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict

ScriptedVerdict = AuditVerdict | BaseException


@register_auditor("scripted")
class ScriptedAuditor:
    """Returns scripted verdicts in order; the last one repeats once the script runs out."""

    name: ClassVar[str]

    @classmethod
    def from_config(cls, config: AuditorConfig) -> ScriptedAuditor:
        """An auditor with an empty script: every verdict is clean."""
        return cls()

    @classmethod
    def contract_config(cls, env: ContractEnv) -> AuditorConfig:
        """The contract builds it with the defaults (it answers clean; ``env`` is not needed)."""
        return AuditorConfig()

    def __init__(
        self,
        verdicts: Sequence[ScriptedVerdict] | Callable[[AuditCandidate], ScriptedVerdict] = (),
        *,
        delay_s: float = 0.0,
        label: str = "scripted@fake",
    ) -> None:
        self._delay_s = delay_s
        self.label = label
        self.calls: list[AuditCandidate] = []
        self.script(verdicts)

    def script(
        self, verdicts: Sequence[ScriptedVerdict] | Callable[[AuditCandidate], ScriptedVerdict]
    ) -> None:
        """Answer the following candidates from ``verdicts`` (empty: always clean)."""
        self._verdicts = verdicts
        self._answered = 0  # counted apart from ``calls``, which tests may clear

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        """Record ``candidate`` and return (or raise) the next scripted verdict."""
        self.calls.append(candidate)
        verdicts, position = self._verdicts, self._answered  # this call's place in the script
        self._answered += 1
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        if callable(verdicts):
            result = verdicts(candidate)
        elif verdicts:
            result = verdicts[min(position, len(verdicts) - 1)]
        else:
            result = AuditVerdict.clean(rationale="scripted clean verdict", auditor=self.label)
        if isinstance(result, BaseException):
            raise result
        return result
