"""Run the implicit and explicit trials of a set of plans against a chat model.

The model is anything with ``async complete(UpstreamCall) -> ChatCompletion``
(the project's chat seam): ``EndpointChat`` for a real OpenAI-compatible endpoint or
the proxy, ``ScriptedChatModel`` in tests. Trials run concurrently up to a limit;
one trial's failure is recorded as an ``error`` trial, not raised, unless every
call fails from the start (then the endpoint is unusable and the run stops).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dmt_bench.endpoint import Endpoint
from dmt_bench.iat.parsing import parse_explicit, parse_implicit
from dmt_bench.iat.prompts import explicit_prompt, implicit_prompt
from dmt_bench.iat.results import TestType, TrialRecord
from dmt_bench.iat.trials import TrialPlan
from dmt_proxy.errors import ConfigError, UpstreamError
from dmt_proxy.openai_types import ChatCompletion
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall

DEFAULT_MAX_TOKENS: dict[TestType, int] = {"implicit": 64, "explicit": 128}
# stop early only if nothing at all worked: a dead endpoint, wrong model name, ...
FAIL_FAST_AFTER = 8


class CompletionModel(Protocol):
    """The part of the chat seam the probe needs (``ScriptedChatModel`` fits)."""

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """Return the model's ``chat.completion``."""
        ...


class EndpointChat:
    """``CompletionModel`` over an ``Endpoint`` (llama-server, any OpenAI API, the proxy)."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint
        self._client = endpoint.client()

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """One chat completion; request parameters come from ``call.params``."""
        completion = await self._client.chat.completions.create(
            model=call.endpoint.model, messages=call.wire_messages(), **call.params
        )
        return ChatCompletion.model_validate(completion.model_dump(exclude_none=True))

    async def check_reachable(self) -> None:
        """Fail in seconds, not after every retry of every trial, when nothing listens."""
        from openai import APIConnectionError, APIStatusError

        try:
            await self._client.with_options(max_retries=0, timeout=10).models.list()
        except APIConnectionError as exc:
            raise ConfigError(f"cannot reach {self.endpoint.base_url}: {exc}") from exc
        except APIStatusError:
            pass  # reachable; some servers do not list models

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._client.close()


@dataclass(frozen=True)
class SamplingConfig:
    """Request settings shared by all trials (temperature 0 is the paper's setting)."""

    model: str
    temperature: float = 0.0
    max_tokens_implicit: int = DEFAULT_MAX_TOKENS["implicit"]
    max_tokens_explicit: int = DEFAULT_MAX_TOKENS["explicit"]
    json_mode: bool = False
    """Also send ``response_format={"type": "json_object"}`` (off: prompt-only, as the paper)."""
    send_seed: bool = True
    """Send the trial seed as the request ``seed`` (reproducible sampling when temperature > 0)."""


@dataclass(frozen=True)
class Progress:
    """A progress snapshot passed to the progress callback after each trial."""

    done: int
    total: int
    invalid: int
    errors: int
    elapsed_s: float


def build_call(plan: TrialPlan, test: TestType, sampling: SamplingConfig) -> UpstreamCall:
    """The request of one trial."""
    prompt = implicit_prompt(plan) if test == "implicit" else explicit_prompt(plan)
    max_tokens = (
        sampling.max_tokens_implicit if test == "implicit" else sampling.max_tokens_explicit
    )
    params: dict[str, Any] = {"temperature": sampling.temperature, "max_tokens": max_tokens}
    if sampling.send_seed:
        params["seed"] = plan.seed
    if sampling.json_mode:
        params["response_format"] = {"type": "json_object"}
    # The endpoint's address is ``EndpointChat``'s; the call names the model only.
    return UpstreamCall(
        ModelEndpoint(model=sampling.model),
        messages=[{"role": "user", "content": prompt}],
        params=params,
        label=f"iat {plan.key}/{test}",
    )


def score_answer(
    plan: TrialPlan, test: TestType, prompt: str, answer: str, latency_s: float
) -> TrialRecord:
    """Parse and score a raw answer into a trial record."""
    if test == "implicit":
        imp = parse_implicit(answer, plan)
        return TrialRecord(
            test=test,
            plan=plan,
            prompt=prompt,
            answer=answer,
            outcome=imp.outcome,
            method=imp.method,
            mask1=imp.mask1,
            mask2=imp.mask2,
            detail=imp.invalid_reason,
            latency_s=latency_s,
        )
    exp = parse_explicit(answer, plan)
    return TrialRecord(
        test=test,
        plan=plan,
        prompt=prompt,
        answer=answer,
        outcome=exp.outcome,
        method=exp.method,
        choice=exp.choice,
        reason=exp.reason,
        detail=exp.invalid_reason,
        latency_s=latency_s,
    )


async def run_trials(
    model: CompletionModel,
    plans: Sequence[TrialPlan],
    sampling: SamplingConfig,
    *,
    tests: Sequence[TestType] = ("implicit", "explicit"),
    concurrency: int = 4,
    on_progress: Callable[[Progress], None] | None = None,
    on_record: Callable[[TrialRecord], None] | None = None,
    done: Mapping[str, TrialRecord] | None = None,
) -> list[TrialRecord]:
    """Run every (plan, test) pair; records come back in plan order, implicit first.

    ``done`` maps record keys to records of an earlier, interrupted run: those are
    reused, not asked again. ``on_record`` sees each new record as it completes.
    """
    done = done or {}
    jobs = [(plan, test) for plan in plans for test in tests]
    records: list[TrialRecord | None] = [done.get(f"{plan.key}/{test}") for plan, test in jobs]
    todo = [i for i, record in enumerate(records) if record is None]
    semaphore = asyncio.Semaphore(max(1, concurrency))
    started = time.perf_counter()
    state = {"done": 0, "invalid": 0, "errors": 0}

    async def one(index: int, plan: TrialPlan, test: TestType) -> None:
        call = build_call(plan, test, sampling)
        prompt = str(call.messages[0].content)
        async with semaphore:
            t0 = time.perf_counter()
            try:
                completion = await model.complete(call)
            except Exception as exc:  # any failure of one call is data about that trial
                record = TrialRecord(
                    test=test,
                    plan=plan,
                    prompt=prompt,
                    answer=None,
                    outcome="error",
                    detail=f"{type(exc).__name__}: {exc}",
                    latency_s=time.perf_counter() - t0,
                )
            else:
                text = completion.text()
                record = score_answer(plan, test, prompt, text, time.perf_counter() - t0)
        records[index] = record
        if on_record is not None:
            on_record(record)
        state["done"] += 1
        state["invalid"] += record.outcome == "invalid"
        state["errors"] += record.outcome == "error"
        if state["errors"] >= FAIL_FAST_AFTER and state["errors"] == state["done"]:
            raise UpstreamError(
                f"the first {state['errors']} calls all failed; last: {record.detail}",
                upstream=sampling.model,
            )
        if on_progress is not None:
            on_progress(
                Progress(
                    state["done"],
                    len(todo),
                    state["invalid"],
                    state["errors"],
                    time.perf_counter() - started,
                )
            )

    tasks = [asyncio.create_task(one(i, *jobs[i])) for i in todo]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return [r for r in records if r is not None]
