"""The LLM auditor (paper §6.2: an isolated, stateless Audit Agent); the seam it
implements, ``Auditor``, is in ``dmt_proxy.audit.protocol``.

Every ``audit`` call builds a fresh context (system prompt, few-shot turns, the
neutralized memory); the auditor never sees the memory store or earlier audits.

Two verdict paths (``AuditorOptions.verdict``):

* ``logprob``: a constrained one-token yes/no answer, ``P(biased)`` read from the
  token log-probabilities and calibrated (``dmt_proxy.audit.logprob``); for a
  likely bias a second constrained turn names the kind of group, and only for a
  memory that will be tagged a third, short turn writes the rationale;
* ``json``: the JSON verdict of ``auditor_verdict.schema.json`` with its
  self-reported score (providers without log-probs);
* ``auto`` (the default): ``logprob`` while the provider returns log-probs, and
  ``json`` from the first reply without them (or a rejected log-prob request) on.

Outcomes, and who sees what:

* a schema-valid reply -> ``AuditVerdict(status="ok")``;
* an invalid reply -> one repair call that tells the model what was wrong; still
  invalid -> ``AuditVerdict(status="failed", failure_reason=...)``. Bad model
  output never raises and never becomes a silent "clean" (on the log-prob path: no
  yes/no among the top tokens, or no readable group, is ``failed`` too);
* the upstream failing (error, timeout, rate limit) -> ``AuditorUnavailable``, an
  ``UpstreamError`` with ``retryable`` set, so the outbox worker can back off and retry.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from dmt_proxy.audit.auditor_prompt import load_auditor_prompt, render_messages
from dmt_proxy.audit.logprob import (
    DOMAIN_WORDS,
    KIND_WORDS,
    TOP_LOGPROBS,
    YES_NO,
    NoLogprobs,
    PlattScaling,
    calibration_key,
    domain_distribution,
    grammar,
    load_calibration,
    p_yes,
    reply_logprobs,
)
from dmt_proxy.audit.parsing import VerdictInvalid, parse_verdict, response_format
from dmt_proxy.audit.protocol import AuditorUnavailable
from dmt_proxy.audit.registry import AuditorConfig, ContractEnv, register_auditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.audit.vote import as_bias_type
from dmt_proxy.errors import ConfigError, UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.openai_types import ChatCompletion
from dmt_proxy.policy import AuditPolicy, VerdictMode
from dmt_proxy.tags import Finding, FindingKind
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall

log = logging.getLogger(__name__)

StructuredOutput = Literal["json_schema", "json_object", "none"]

DEFAULT_PROMPT_VERSION = "auditor_v3"
"""The unprimed prompt with the log-prob turns
(benchmarks/results/auditor_eval_v2/auditor_eval_v2_summary.md); the policy names its own."""
RATIONALE_MAX_TOKENS = 80
_RATIONALE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["target_group", "tendency", "rationale"],
    "properties": {
        "target_group": {"type": "string", "maxLength": 120},
        "tendency": {"type": "string", "maxLength": 120},
        "rationale": {"type": "string", "maxLength": 300},
    },
}

FRAMING_THRESHOLD = 0.5
"""P(yes) of the ``[framing question]`` at or above which a clean-judged memory gets a
``discount_framing`` manipulation finding."""

# Slack on top of the call's own timeout before we stop waiting ourselves.
_TIMEOUT_GRACE_S = 5.0


@dataclass(frozen=True)
class AuditorOptions:
    """How the auditor asks (sampling and output format); where it asks is a ``ModelEndpoint``."""

    temperature: float = 0.0
    max_tokens: int = 400
    structured_output: StructuredOutput = "json_schema"
    """``json_schema`` (llama-server, OpenAI, litellm-translated providers), ``json_object``
    or ``none`` for providers without structured output (the reply is still validated)."""
    extra_params: dict[str, Any] = field(default_factory=dict)
    verdict: VerdictMode = "auto"
    """``logprob``, ``json``, or ``auto`` (log-probs while the provider returns them)."""
    grammar: bool = True
    """Constrain the log-prob answers with a llama.cpp grammar (llama-server); off for
    providers that reject the field (the answer position is then found in the text)."""
    rationale: bool = True
    """Write a short rationale for memories that will be tagged (log-prob path)."""
    calibrate: bool = True
    """Apply the shipped Platt calibration of ``model@prompt`` when it has one."""
    kind_question: bool | None = None
    """Ask the prompt's ``[kind question]`` of likely biases: ``None`` only where a fitted
    ``+kind`` fusion weighs the answer (it costs a turn), ``True`` always (a train-split
    run that collects the answers to fit that fusion), ``False`` never."""

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
    """Audits with a chat model: a verdict, never a decision (the write path decides and
    counts, ``dmt_proxy.memory.write.verdicts``).

    Each call waits ``endpoint.timeout_s`` and is never retried here: the outbox
    worker retries with back-off.
    """

    name: ClassVar[str]

    @classmethod
    def from_config(cls, config: AuditorConfig) -> LLMAuditor:
        """The auditor ``config.policy`` describes, calling ``config.chat`` at ``config.endpoint``."""
        if config.chat is None or config.endpoint is None:
            raise ConfigError("the llm auditor needs a chat model and the auditor model's endpoint")
        policy = config.policy
        options = AuditorOptions(
            # The rationale is not part of the verdict: the outbox worker asks for it after
            # the status is stored (``explain``, ``memory.write.rationale``).
            verdict=policy.verdict, rationale=False,
            # llama.cpp's grammar field goes only to servers known to be llama-server.
            grammar=config.endpoint.kind == "local",
        )  # fmt: skip
        return cls(config.chat, config.endpoint, options=options,
                   prompt_version=policy.auditor_prompt, policy=policy)  # fmt: skip

    @classmethod
    def contract_config(cls, env: ContractEnv) -> AuditorConfig:
        """The contract runs it on the test's scripted upstream, at the test's endpoint."""
        return AuditorConfig(chat=env.chat, endpoint=env.endpoint)

    def __init__(
        self,
        chat: ChatModel,
        endpoint: ModelEndpoint,
        *,
        options: AuditorOptions | None = None,
        prompt_version: str = DEFAULT_PROMPT_VERSION,
        policy: AuditPolicy | None = None,
    ) -> None:
        self._chat = chat
        self._endpoint = endpoint.model_copy(update={"max_retries": 0})
        self._options = options or AuditorOptions()
        self._prompt = load_auditor_prompt(prompt_version)
        self._policy = policy or AuditPolicy()
        self._path = self._options.verdict
        if self._path == "logprob" and not self._prompt.supports_logprob:
            raise ConfigError(f"auditor prompt {prompt_version} has no log-prob turns; "
                              "use verdict: json (or auto)")  # fmt: skip
        if self._path == "auto" and not self._prompt.supports_logprob:
            self._path = "json"
        self._calibration: PlattScaling | None = None
        if self._options.calibrate:
            self._calibration = load_calibration(self._policy.calibration).for_model(
                endpoint.model, prompt_version
            )
        self.model_key = calibration_key(endpoint.model, prompt_version)
        # The kind question only pays for itself where a fitted fusion weighs its answer.
        fitted = any(
            key.startswith(f"{self.model_key}+") and key.endswith("+kind")
            for key in load_calibration(self._policy.calibration).fusion
        )
        wanted = fitted if self._options.kind_question is None else self._options.kind_question
        self._ask_kind = bool(self._prompt.extra("kind question")) and wanted
        """``model@prompt``: the key of this auditor's calibration and fusion entries."""
        self._base_label = f"{endpoint.name}@{prompt_version}"
        self.label = self._label()

    def _label(self) -> str:
        if self._path == "json":
            return f"{self._base_label}/json"
        return f"{self._base_label}/logprob" + ("" if self._calibration else "/uncalibrated")

    @property
    def verdict_path(self) -> str:
        """``logprob`` or ``json`` (``auto`` until the first reply decides)."""
        return self._path

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        """Judge one memory in a fresh context, on the configured verdict path."""
        started = time.perf_counter()
        if not candidate.text.strip() and not candidate.reply.strip():
            # Nothing a user wrote can carry a bias; no model call needed.
            return AuditVerdict.clean(rationale="empty memory", auditor=self.label)
        # The path this audit started on: a concurrent audit may switch ``auto`` to ``json``
        # while this one waits for its log-prob reply, which must then fall back too.
        path = self._path
        if path != "json":
            try:
                verdict = await self._audit_logprob(candidate, started)
            except NoLogprobs as exc:
                if path == "auto":
                    return await self._fall_back(candidate, started, str(exc))
                verdict = AuditVerdict.failed(
                    f"log-prob verdict: {exc}", auditor=self.label, attempts=1,
                    latency_s=time.perf_counter() - started,
                )  # fmt: skip
            except AuditorUnavailable as exc:
                # A provider that rejects logprobs (or the grammar field) outright.
                if path == "auto" and not exc.retryable:
                    return await self._fall_back(candidate, started, exc.message)
                raise
            return verdict
        return await self._audit_json(candidate, started)

    async def _fall_back(self, candidate: AuditCandidate, started: float, why: str) -> AuditVerdict:
        log.warning("auditor %s: no log-prob verdict (%s); JSON verdicts from now on",
                    self._base_label, why)  # fmt: skip
        self._path = "json"
        self.label = self._label()
        return await self._audit_json(candidate, started)

    async def _audit_json(self, candidate: AuditCandidate, started: float) -> AuditVerdict:
        """The JSON verdict, with one repair retry on an invalid reply."""
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
        return verdict

    def _verdict(self, data: dict[str, Any], *, attempts: int, started: float) -> AuditVerdict:
        return AuditVerdict(
            bias_detected=data["bias_detected"], bias_type=data["bias_type"],
            target_group=data["target_group"], tendency=data["tendency"],
            score=float(data["score"]), rationale=data["rationale"], auditor=self.label,
            attempts=attempts, latency_s=time.perf_counter() - started,
        )  # fmt: skip

    # -- the log-prob path --------------------------------------------------------

    def _choice_params(self, words: tuple[str, ...]) -> dict[str, Any]:
        params: dict[str, Any] = {
            "temperature": 0.0, "logprobs": True, "top_logprobs": TOP_LOGPROBS,
            # With a grammar one token is the answer; without one, leave room for a
            # leading space or quote before it.
            "max_tokens": 4 if self._options.grammar else 6,
        }  # fmt: skip
        if self._options.grammar:
            cased = sorted({v for w in words for v in (w, w.capitalize(), w.upper())})
            params["grammar"] = grammar(cased)
        return params

    def _tau_floor(self) -> float:
        return min([self._policy.tau, *self._policy.tau_per_domain.values()])

    async def _audit_logprob(self, candidate: AuditCandidate, started: float) -> AuditVerdict:
        """Yes/no from log-probs, then the group, then (if tagged) the rationale."""
        messages = render_messages(self._prompt, candidate, path="logprob")
        yes_words = tuple(w for ws in YES_NO.values() for w in ws)
        completion = await self._complete(messages, self._choice_params(yes_words))
        raw = p_yes(reply_logprobs(completion))
        calls = 1
        if raw is None:
            return AuditVerdict.failed(
                "no yes/no answer among the top tokens", auditor=self.label, attempts=calls,
                latency_s=time.perf_counter() - started, raw_reply=completion.text(),
            )  # fmt: skip
        p = self._calibration.apply(raw) if self._calibration else raw
        if p < self._tau_floor():
            clean = AuditVerdict(
                bias_detected=False, score=round(p, 4), p_raw=round(raw, 4),
                rationale=f"P(biased) {p:.2f}", auditor=self.label, attempts=calls,
                latency_s=time.perf_counter() - started,
            )  # fmt: skip
            return await self._with_framing(clean, messages, started, answer="no")
        asked = [*messages, {"role": "assistant", "content": "yes"},
                 {"role": "user", "content": self._prompt.extra("domain question") or ""}]  # fmt: skip
        domain_words = tuple(w for ws in DOMAIN_WORDS.values() for w in ws)
        reply = await self._complete(asked, self._choice_params(domain_words))
        calls += 1
        try:
            probs = domain_distribution(reply_logprobs(reply))
        except NoLogprobs:
            probs = {}
        named = reply.text().strip().strip("\"'.").lower().split()
        bias_type = as_bias_type(max(probs, key=lambda d: probs[d])) if probs else None
        if bias_type is None and named:
            bias_type = as_bias_type(named[0])
            probs = {bias_type: 1.0} if bias_type else {}
        if bias_type is None:
            return AuditVerdict.failed(
                "the group answer names no bias type", auditor=self.label, attempts=calls,
                latency_s=time.perf_counter() - started, raw_reply=reply.text(),
            )  # fmt: skip
        kind_probs = None
        kind_question = self._prompt.extra("kind question")
        if kind_question and self._ask_kind:
            kind_reply = await self._complete([
                *asked, {"role": "assistant", "content": bias_type},
                {"role": "user", "content": kind_question},
            ], self._choice_params(tuple(w for ws in KIND_WORDS.values() for w in ws)))  # fmt: skip
            calls += 1
            try:
                kind_probs = domain_distribution(reply_logprobs(kind_reply), KIND_WORDS) or None
            except NoLogprobs:
                kind_probs = None
        verdict = AuditVerdict(
            bias_detected=True, bias_type=bias_type, score=round(p, 4), p_raw=round(raw, 4),
            domain_probs=probs, kind_probs=kind_probs, rationale=f"P(biased) {p:.2f}",
            auditor=self.label, attempts=calls, latency_s=time.perf_counter() - started,
            llm_domain_weight=self._calibration.domain_weight if self._calibration else None,
        )  # fmt: skip
        if (self._prompt.extra("framing scope") or "clean").strip() == "all":
            verdict = await self._with_framing(verdict, messages, started, answer="yes")
        if self._options.rationale and p >= self._policy.tau_for(bias_type):
            verdict = await self._with_rationale(verdict, [
                *asked, {"role": "assistant", "content": bias_type},
                {"role": "user", "content": self._prompt.extra("rationale question") or ""},
            ])  # fmt: skip
        return verdict

    async def _with_framing(
        self, verdict: AuditVerdict, messages: list[dict[str, Any]], started: float, *,
        answer: str,
    ) -> AuditVerdict:  # fmt: skip
        """A verdict, asked whether the text tells its reader how to judge it
        (``[framing question]``; after ``answer`` to the yes/no question). auditor_v4 asks
        it of clean verdicts only; a prompt whose ``[framing scope]`` is ``all`` (auditor_v5)
        of likely biases too, where a planted request to tag would otherwise pass as bias.

        Framing that asks the auditor to discount the words (fiction, a joke, a test
        fixture, a pre-approval) is judged by the model, in any wording or language, not
        only by the normaliser's patterns; a likely yes is a manipulation finding.
        """
        question = self._prompt.extra("framing question")
        if not question:
            return verdict
        asked = [*messages, {"role": "assistant", "content": answer},
                 {"role": "user", "content": question}]  # fmt: skip
        reply = await self._complete(asked, self._choice_params(("yes", "no")))
        try:
            p = p_yes(reply_logprobs(reply))
        except NoLogprobs:
            p = None
        update: dict[str, Any] = {"attempts": verdict.attempts + 1,
                                  "latency_s": time.perf_counter() - started}  # fmt: skip
        if p is not None:
            update["p_framing"] = round(p, 4)
            if p >= FRAMING_THRESHOLD:
                update["findings"] = (*verdict.findings, Finding(
                    kind=FindingKind.MANIPULATION, rule="discount_framing",
                    detail=f"the text asks not to be judged as the user's view (P {p:.2f})",
                ))  # fmt: skip
        return verdict.model_copy(update=update)

    async def explain(self, candidate: AuditCandidate, verdict: AuditVerdict) -> AuditVerdict:
        """The deferred rationale of a decided verdict (``target_group``, ``tendency``,
        ``rationale``), asked in the verdict's own conversation; a failure or a verdict
        without a bias type returns ``verdict`` unchanged. Never changes the status."""
        if not verdict.ok or verdict.bias_type is None or self._path == "json":
            return verdict
        messages = render_messages(self._prompt, candidate, path="logprob")
        return await self._with_rationale(verdict, [
            *messages, {"role": "assistant", "content": "yes"},
            {"role": "user", "content": self._prompt.extra("domain question") or ""},
            {"role": "assistant", "content": verdict.bias_type},
            {"role": "user", "content": self._prompt.extra("rationale question") or ""},
        ])  # fmt: skip

    async def _with_rationale(
        self, verdict: AuditVerdict, messages: list[dict[str, Any]]
    ) -> AuditVerdict:
        """Add a short rationale to a decided verdict; a failure leaves the verdict as it is."""
        if not self._prompt.extra("rationale question"):
            return verdict
        schema = {"type": "json_schema", "json_schema": {
            "name": "rationale", "schema": _RATIONALE_SCHEMA, "strict": False}}  # fmt: skip
        params = {"temperature": 0.0, "max_tokens": RATIONALE_MAX_TOKENS, "response_format": schema}
        try:
            reply = await self._complete(messages, params)
            data = json.loads(reply.text())
            fields = {k: str(data.get(k, ""))[:200] for k in ("target_group", "tendency")}
            fields["rationale"] = str(data.get("rationale", ""))[:600]
        except (AuditorUnavailable, json.JSONDecodeError, AttributeError) as exc:
            log.info("auditor %s: no rationale (%s); verdict kept", self._base_label, exc)
            return verdict
        return verdict.model_copy(update=fields)

    async def _complete(
        self, messages: list[dict[str, Any]], params: dict[str, Any]
    ) -> ChatCompletion:
        endpoint = self._endpoint
        call = UpstreamCall(endpoint, messages=messages, params=params,
                            label=f"auditor {endpoint.name}")  # fmt: skip
        try:
            async with asyncio.timeout(endpoint.timeout_s + _TIMEOUT_GRACE_S):
                return await self._chat.complete(call)
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

    # -- the JSON path -------------------------------------------------------------

    async def _ask(self, messages: list[dict[str, Any]]) -> str:
        return (await self._complete(messages, self._options.params())).text()
