"""A scripted auditor shipped for tests and demos. It is not a language model.

``ScriptedAuditor`` answers from a list of verdicts (or a function of the
candidate), records every candidate it receives, and can raise a given error
(e.g. ``AuditorUnavailable``) to exercise the worker's retry path. Registered as
the ``scripted`` auditor; built by name it answers clean.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import ClassVar

from dmt_proxy.audit.registry import AuditorConfig, register_auditor
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

    def __init__(
        self,
        verdicts: Sequence[ScriptedVerdict] | Callable[[AuditCandidate], ScriptedVerdict] = (),
        *,
        delay_s: float = 0.0,
        label: str = "scripted@fake",
    ) -> None:
        self._verdicts = verdicts
        self._delay_s = delay_s
        self.label = label
        self.calls: list[AuditCandidate] = []

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        """Record ``candidate`` and return (or raise) the next scripted verdict."""
        self.calls.append(candidate)
        if self._delay_s:
            await asyncio.sleep(self._delay_s)
        if callable(self._verdicts):
            result = self._verdicts(candidate)
        elif self._verdicts:
            result = self._verdicts[min(len(self.calls), len(self._verdicts)) - 1]
        else:
            result = AuditVerdict.clean(rationale="scripted clean verdict", auditor=self.label)
        if isinstance(result, BaseException):
            raise result
        return result
