"""Ask one DIB decision of an OpenAI-compatible endpoint and read the score.

Two modes, one request per decision:

- ``expected``: temperature 0, ``logprobs`` with ``top_logprobs`` and (by
  default) the 0–100 GBNF grammar; the score is the expected value of the
  answer (``answers.expected_score``). If the reply carries no log-probabilities
  (a hosted model, or a proxy that drops them) the same reply is parsed
  strictly instead, and the result says so (``method="parsed"``).
- ``generate``: temperature 0, free text, strict parser; refusals and
  unparseable answers are counted, never imputed.

Transport failures become ``outcome="error"`` results (after the client's own
retries): they are reported, not dropped.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

import openai
from pydantic import BaseModel, ConfigDict, Field

from dmt_bench.dib.answers import (
    GRAMMAR_0_100,
    ParseOutcome,
    TokenStep,
    expected_score,
    parse_answer,
)
from dmt_bench.dib.schema import Sample
from dmt_bench.endpoint import Endpoint


class ScoringMode(str, Enum):
    """How a decision's number is obtained."""

    EXPECTED = "expected"
    GENERATE = "generate"


class ScoringConfig(BaseModel):
    """Request parameters for scoring; part of the report."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    mode: ScoringMode = ScoringMode.EXPECTED
    grammar: bool = True
    """Send the 0–100 GBNF grammar (``extra_body.grammar``; llama.cpp) in expected mode."""
    top_logprobs: int = Field(default=20, ge=1, le=20)
    max_tokens_expected: int = 4
    """3 digits at most, plus the end step llama.cpp reports."""
    max_tokens_generate: int = 32
    """Enough for a refusal sentence to be recognisable."""
    seed: int | None = 0


class Outcome(str, Enum):
    """What became of one decision."""

    SCORED = "scored"
    REFUSED = "refused"
    UNPARSEABLE = "unparseable"
    ERROR = "error"


class Method(str, Enum):
    """Where a score came from."""

    EXPECTED = "expected"
    PARSED = "parsed"
    NONE = "none"


class DecisionResult(BaseModel):
    """One decision: the sample's identity, the outcome and the score."""

    model_config = ConfigDict(frozen=True)
    sample_id: str
    domain: str
    group: str
    context_id: str
    outcome: Outcome
    method: Method
    raw: float | None = None
    """The answer on the task's own scale (expected value or parsed integer)."""
    score: float | None = None
    """``raw`` as favourability (risk inverted): what every metric uses."""
    greedy: int | None = None
    """The integer the model actually wrote, when it wrote one."""
    valid_mass: float | None = None
    text: str = ""
    reason: str = ""
    latency_s: float = 0.0
    memories: int | None = None
    """How many memories the proxy showed with this decision (its ``x-dmt-memories``
    header); None when the reply has no such header (not the proxy, or memory off)."""


def request_params(sample: Sample, endpoint: Endpoint, config: ScoringConfig) -> dict[str, Any]:
    """Keyword arguments for ``client.chat.completions.create`` for this sample."""
    params: dict[str, Any] = {
        "model": endpoint.model_name(),
        "messages": sample.messages(),
        "temperature": 0.0,
    }
    if config.seed is not None:
        params["seed"] = config.seed
    if config.mode is ScoringMode.EXPECTED:
        params["max_tokens"] = config.max_tokens_expected
        params["logprobs"] = True
        params["top_logprobs"] = config.top_logprobs
        if config.grammar:
            params["extra_body"] = {"grammar": GRAMMAR_0_100}
    else:
        params["max_tokens"] = config.max_tokens_generate
    return params


def _steps(choice: Any) -> list[TokenStep] | None:
    logprobs = getattr(choice, "logprobs", None)
    content = getattr(logprobs, "content", None) if logprobs is not None else None
    if not content:
        return None
    return [
        TokenStep(
            token=item.token,
            logprob=item.logprob,
            top={alt.token: alt.logprob for alt in (item.top_logprobs or [])},
        )
        for item in content
    ]


def read_reply(sample: Sample, completion: Any, config: ScoringConfig) -> DecisionResult:
    """Turn a chat completion into a ``DecisionResult`` (pure; no I/O)."""
    base: dict[str, Any] = {
        "sample_id": sample.id,
        "domain": sample.domain,
        "group": sample.group,
        "context_id": sample.context_id,
    }
    choices = getattr(completion, "choices", None) or []
    if not choices:
        return DecisionResult(
            **base, outcome=Outcome.UNPARSEABLE, method=Method.NONE, reason="no choices in reply"
        )
    choice = choices[0]
    text = (choice.message.content or "") if choice.message is not None else ""
    steps = _steps(choice) if config.mode is ScoringMode.EXPECTED else None
    if steps is not None:
        est = expected_score(steps, constrained=config.grammar)
        if est is not None:
            return DecisionResult(
                **base,
                outcome=Outcome.SCORED,
                method=Method.EXPECTED,
                raw=est.value,
                score=sample.favourability(est.value),
                greedy=est.greedy,
                valid_mass=est.valid_mass,
                text=text[:200],
            )
    parsed = parse_answer(text, minimum=sample.scale.min, maximum=sample.scale.max)
    if parsed.outcome is ParseOutcome.SCORED and parsed.value is not None:
        return DecisionResult(
            **base,
            outcome=Outcome.SCORED,
            method=Method.PARSED,
            raw=float(parsed.value),
            score=sample.favourability(parsed.value),
            greedy=parsed.value,
            text=text[:200],
        )
    outcome = Outcome.REFUSED if parsed.outcome is ParseOutcome.REFUSED else Outcome.UNPARSEABLE
    return DecisionResult(
        **base, outcome=outcome, method=Method.NONE, text=text[:200], reason=parsed.reason
    )


async def ask(
    sample: Sample,
    endpoint: Endpoint,
    config: ScoringConfig | None = None,
    *,
    client: Any | None = None,
) -> DecisionResult:
    """Send ``sample`` to ``endpoint`` once and score the reply.

    ``client`` is an ``openai.AsyncOpenAI`` (default: ``endpoint.client()``);
    pass one to share its connection pool across many decisions. Transport and
    API errors are returned as ``outcome="error"``, except a 400 (bad request),
    which is raised: it means the request shape (grammar, logprobs) is wrong
    for this endpoint, not that this one decision failed.
    """
    config = config or ScoringConfig()
    client = client or endpoint.client()
    started = time.perf_counter()
    try:
        # The raw response: the reply, and the headers where the proxy counts the memories.
        raw = await client.chat.completions.with_raw_response.create(
            **request_params(sample, endpoint, config)
        )
        completion = raw.parse()
    except openai.BadRequestError:
        raise
    except openai.APIError as exc:
        return DecisionResult(
            sample_id=sample.id,
            domain=sample.domain,
            group=sample.group,
            context_id=sample.context_id,
            outcome=Outcome.ERROR,
            method=Method.NONE,
            reason=f"{type(exc).__name__}: {exc}"[:300],
            latency_s=time.perf_counter() - started,
        )
    result = read_reply(sample, completion, config)
    shown = raw.headers.get("x-dmt-memories")
    return result.model_copy(
        update={
            "latency_s": time.perf_counter() - started,
            "memories": int(shown) if shown and shown.isdigit() else None,
        }
    )
