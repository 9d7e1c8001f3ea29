"""The auditor seam and the LLM auditor (paper §6.2: an isolated, stateless Audit Agent).

Every ``audit`` call builds a fresh context (system prompt, few-shot turns, the
neutralized memory); the auditor never sees the memory store or earlier audits.

Outcomes, and who sees what:

* a schema-valid reply -> ``AuditVerdict(status="ok")``;
* an invalid reply -> one repair call that tells the model what was wrong; still
  invalid -> ``AuditVerdict(status="failed", failure_reason=...)``. Bad model
  output never raises and never becomes a silent "clean";
* the upstream failing (error, timeout, rate limit) -> ``AuditorUnavailable``, an
  ``UpstreamError`` with ``retryable`` set, so the outbox worker can back off and retry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from dmt_proxy.audit.auditor_prompt import load_auditor_prompt, render_messages
from dmt_proxy.audit.registry import AuditorConfig, register_auditor
from dmt_proxy.audit.schema import (
    AuditCandidate,
    AuditVerdict,
    VerdictInvalid,
    parse_verdict,
    response_format,
)
from dmt_proxy.errors import ConfigError, UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall

log = logging.getLogger(__name__)

StructuredOutput = Literal["json_schema", "json_object", "none"]

DEFAULT_PROMPT_VERSION = "auditor_v2"
"""Best measured prompt (benchmarks/results/auditor_eval_*_test_n20.md); the policy names its own."""

# Slack on top of the call's own timeout before we stop waiting ourselves.
_TIMEOUT_GRACE_S = 5.0


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


@dataclass(frozen=True)
class AuditorOptions:
    """How the auditor asks (sampling and output format); where it asks is a ``ModelEndpoint``."""

    temperature: float = 0.0
    max_tokens: int = 400
    structured_output: StructuredOutput = "json_schema"
    """``json_schema`` (llama-server, OpenAI, litellm-translated providers), ``json_object``
    or ``none`` for providers without structured output (the reply is still validated)."""
    extra_params: dict[str, Any] = field(default_factory=dict)

    def params(self) -> dict[str, Any]:
        """Sampling and output-format parameters for one call."""
        params: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        if self.structured_output == "json_schema":
            params["response_format"] = response_format()
        elif self.structured_output == "json_object":
            params["response_format"] = {"type": "json_object"}
        params.update(self.extra_params)
        return params


_REPAIR = (
    "Your previous reply was not a valid verdict: {reason}. Reply again with only the JSON "
    "object, with exactly the keys rationale, bias_detected, bias_type, target_group, "
    "tendency and score, following the format in the instructions."
)


@register_auditor("llm")
class LLMAuditor:
    """Audits with a chat model; counts outcomes, tags and latency when given ``metrics``.

    Each call waits ``endpoint.timeout_s`` and is never retried here: the outbox
    worker retries with back-off.
    """

    name: ClassVar[str]

    @classmethod
    def from_config(cls, config: AuditorConfig) -> LLMAuditor:
        """The auditor ``config.policy`` describes, calling ``config.chat`` at ``config.endpoint``."""
        if config.chat is None or config.endpoint is None:
            raise ConfigError("the llm auditor needs a chat model and the auditor model's endpoint")
        return cls(
            config.chat, config.endpoint, prompt_version=config.policy.auditor_prompt,
            policy=config.policy, metrics=config.metrics,
        )  # fmt: skip

    def __init__(
        self,
        chat: ChatModel,
        endpoint: ModelEndpoint,
        *,
        options: AuditorOptions | None = None,
        prompt_version: str = DEFAULT_PROMPT_VERSION,
        policy: AuditPolicy | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._chat = chat
        self._endpoint = endpoint.model_copy(update={"max_retries": 0})
        self._options = options or AuditorOptions()
        self._prompt = load_auditor_prompt(prompt_version)
        self._policy = policy or AuditPolicy()
        self._metrics = metrics
        self.label = f"{endpoint.name}@{prompt_version}"

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        """Judge one memory in a fresh context (one repair retry on an invalid reply)."""
        started = time.perf_counter()
        if not candidate.text.strip() and not candidate.reply.strip():
            # Nothing a user wrote can carry a bias; no model call needed.
            return AuditVerdict.clean(rationale="empty memory", auditor=self.label)
        messages = render_messages(self._prompt, candidate)
        reply = await self._ask(messages)
        try:
            verdict = self._verdict(parse_verdict(reply), attempts=1, started=started)
        except VerdictInvalid as first:
            log.info(
                "auditor %s: invalid reply (%s), asking for a repair", self.label, first.reason
            )
            repair = [
                *messages,
                {"role": "assistant", "content": reply[:2000] or "(empty reply)"},
                {"role": "user", "content": _REPAIR.format(reason=first.reason)},
            ]
            reply = await self._ask(repair)
            try:
                verdict = self._verdict(parse_verdict(reply), attempts=2, started=started)
            except VerdictInvalid as second:
                verdict = AuditVerdict.failed(
                    f"invalid reply after one repair retry: {second.reason} "
                    f"(first reply: {first.reason})",
                    auditor=self.label, attempts=2,
                    latency_s=time.perf_counter() - started, raw_reply=reply,
                )  # fmt: skip
                log.warning("auditor %s failed: %s", self.label, verdict.failure_reason)
        self._record(verdict)
        return verdict

    def _verdict(self, data: dict[str, Any], *, attempts: int, started: float) -> AuditVerdict:
        return AuditVerdict(
            bias_detected=data["bias_detected"], bias_type=data["bias_type"],
            target_group=data["target_group"], tendency=data["tendency"],
            score=float(data["score"]), rationale=data["rationale"], auditor=self.label,
            attempts=attempts, latency_s=time.perf_counter() - started,
        )  # fmt: skip

    async def _ask(self, messages: list[dict[str, Any]]) -> str:
        endpoint = self._endpoint
        call = UpstreamCall(endpoint, messages=messages, params=self._options.params(),
                            label=f"auditor {endpoint.name}")  # fmt: skip
        try:
            async with asyncio.timeout(endpoint.timeout_s + _TIMEOUT_GRACE_S):
                completion = await self._chat.complete(call)
        except TimeoutError:
            raise AuditorUnavailable(
                f"auditor {endpoint.name} did not answer within {endpoint.timeout_s:.0f}s",
                upstream=endpoint.name, retryable=True,
            ) from None  # fmt: skip
        except UpstreamTimeout as exc:
            raise AuditorUnavailable(exc.message, upstream=exc.upstream, retryable=True) from exc
        except UpstreamRejected as exc:
            # 429 is a rate limit (retry later); other 4xx mean the call itself is wrong.
            retryable = exc.status_code == 429
            raise AuditorUnavailable(
                exc.message, upstream=exc.upstream, retryable=retryable
            ) from exc
        except UpstreamError as exc:
            raise AuditorUnavailable(exc.message, upstream=exc.upstream, retryable=True) from exc
        return completion.text()

    def _record(self, verdict: AuditVerdict) -> None:
        decision = verdict.decide(self._policy)
        if decision.inconsistent:
            log.info("auditor %s: %s", self.label, decision.reason)
        if self._metrics is None:
            return
        self._metrics.audits.labels(decision.outcome).inc()
        self._metrics.audit_duration.observe(verdict.latency_s)
        tag = decision.tag
        if tag is not None and tag.bias_type is not None and decision.action is not None:
            self._metrics.tags.labels(tag.bias_type, decision.action.value).inc()
