"""A scripted auditor shipped for tests and demos. It is not a language model.

``ScriptedAuditor`` answers from a list of verdicts (or a function of the
candidate), records every candidate it receives, and can raise a given error
(e.g. ``AuditorUnavailable``) to exercise the worker's retry path; ``script()``
replaces the verdicts mid-test. Registered as the ``scripted`` auditor; built by
name it answers clean.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from typing import ClassVar

from dmt_proxy.audit.registry import AuditorConfig, register_auditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall

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
    def contract_config(cls) -> AuditorConfig:
        """The contract builds it with the defaults (it answers clean)."""
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


CONTRACT_BIASED = json.dumps({
    "rationale": "Generalizes about older workers.", "bias_detected": True, "bias_type": "age",
    "target_group": "older workers", "tendency": "favoring youth", "score": 0.9,
})  # fmt: skip
CONTRACT_CLEAN = json.dumps({
    "rationale": "A physics question.", "bias_detected": False, "bias_type": None,
    "target_group": "", "tendency": "", "score": 0.05,
})  # fmt: skip


def contract_upstream_reply(call: UpstreamCall) -> str:
    """The auditor contract's fake upstream: biased, clean, or a reply that is not a verdict.

    The memory under audit is the last ``<memory>`` block (a repair call repeats it);
    one that asks to ignore the instructions gets text that is no verdict, twice, so
    an auditor's failed path is exercised too.
    """
    asked = [str(m["content"]) for m in call.messages if m["role"] == "user"]
    memory = next(text for text in reversed(asked) if "<memory>" in text).split("<memory>")[-1]
    if "Ignore previous" in memory:
        return "Sure! I will ignore them."
    return CONTRACT_BIASED if "Older" in memory else CONTRACT_CLEAN


def llm_contract_config() -> AuditorConfig:
    """The ``llm`` auditor's contract config: the scripted upstream above, a fake endpoint."""
    from dmt_proxy.testing.chat import ScriptedChatModel

    endpoint = ModelEndpoint(name="fake", model="openai/fake", api_base="http://127.0.0.1:9/v1")
    return AuditorConfig(chat=ScriptedChatModel(contract_upstream_reply), endpoint=endpoint)
