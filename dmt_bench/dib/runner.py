"""Run many DIB decisions against one endpoint, bounded by ``Endpoint.concurrency``.

The first decision is sent alone to settle the request shape: an endpoint that
rejects the grammar (400) is retried without it, then without log-probabilities
(generation + strict parser). The effective configuration is returned and
reported. Progress goes to stderr.

Decisions are dispatched by context: each of the ``concurrency`` workers takes a
whole context and asks its decisions one after another. The decisions of one
context share everything up to the group's detail lines (and, through the proxy,
the memory block before that), so a worker's next request starts with what its
server slot has just evaluated and the server's prefix cache reuses it; sent side
by side, two decisions of one context would each evaluate the shared prefix on
their own slot.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

import openai
from pydantic import BaseModel, ConfigDict

from dmt_bench.dib.schema import Sample
from dmt_bench.dib.scorer import (
    DecisionResult,
    Method,
    Outcome,
    ScoringConfig,
    ScoringMode,
    ask,
)
from dmt_bench.endpoint import Endpoint
from dmt_proxy.errors import ConfigError


class RunOutput(BaseModel):
    """Results in sample order, the configuration actually used, and the wall time."""

    model_config = ConfigDict(frozen=True)
    results: list[DecisionResult]
    config: ScoringConfig
    elapsed_s: float


class Progress:
    """Prints ``done/total, rate, refusals, errors`` to a stream at most every ``every_s``."""

    def __init__(self, total: int, stream: TextIO | None, every_s: float = 5.0) -> None:
        self.total = total
        self.stream = stream
        self.every_s = every_s
        self.done = self.refused = self.unparseable = self.errors = 0
        self.started = time.perf_counter()
        self._last = 0.0

    def update(self, result: DecisionResult) -> None:
        self.done += 1
        self.refused += result.outcome is Outcome.REFUSED
        self.unparseable += result.outcome is Outcome.UNPARSEABLE
        self.errors += result.outcome is Outcome.ERROR
        now = time.perf_counter()
        if self.done == self.total or now - self._last >= self.every_s:
            self._last = now
            self.print()

    def print(self) -> None:
        if self.stream is None:
            return
        elapsed = time.perf_counter() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        print(
            f"dib: {self.done}/{self.total} decisions, {rate:.2f}/s, "
            f"{self.refused} refused, {self.unparseable} unparseable, {self.errors} errors",
            file=self.stream,
            flush=True,
        )


def _note(stream: TextIO | None, message: str) -> None:
    if stream is not None:
        print(f"dib: {message}", file=stream, flush=True)


async def _first(
    sample: Sample, endpoint: Endpoint, config: ScoringConfig, client: Any, stream: TextIO | None
) -> tuple[DecisionResult, ScoringConfig]:
    while True:
        try:
            return await ask(sample, endpoint, config, client=client), config
        except openai.BadRequestError as exc:
            if config.mode is ScoringMode.EXPECTED and config.grammar:
                _note(stream, f"endpoint rejected the grammar ({exc.message}); retrying without")
                config = config.model_copy(update={"grammar": False})
            elif config.mode is ScoringMode.EXPECTED:
                _note(stream, "endpoint rejected logprobs; falling back to generation + parser")
                config = config.model_copy(update={"mode": ScoringMode.GENERATE})
            else:
                raise ConfigError(
                    f"endpoint {endpoint.base_url} rejected the request: {exc.message}"
                ) from exc


async def run_decisions(
    samples: Sequence[Sample],
    endpoint: Endpoint,
    config: ScoringConfig | None = None,
    *,
    client: Any | None = None,
    progress: TextIO | None = sys.stderr,
) -> RunOutput:
    """Score every sample; results come back in sample order, none dropped."""
    config = config or ScoringConfig()
    started = time.perf_counter()
    if not samples:
        return RunOutput(results=[], config=config, elapsed_s=0.0)
    client = client or endpoint.client()
    tracker = Progress(len(samples), progress)
    first, config = await _first(samples[0], endpoint, config, client, progress)
    tracker.update(first)
    if first.method is Method.PARSED and config.mode is ScoringMode.EXPECTED:
        _note(progress, "reply carried no log-probabilities; parsing generated text instead")
    effective = config
    results: list[DecisionResult | None] = [first, *([None] * (len(samples) - 1))]
    queue = by_context(samples, start=1)

    async def one(sample: Sample) -> DecisionResult:
        try:
            return await ask(sample, endpoint, effective, client=client)
        except openai.BadRequestError as exc:
            return DecisionResult(
                sample_id=sample.id,
                domain=sample.domain,
                group=sample.group,
                context_id=sample.context_id,
                outcome=Outcome.ERROR,
                method=Method.NONE,
                reason=f"BadRequestError: {exc.message}"[:300],
            )

    async def worker() -> None:
        while queue:
            for index in queue.pop(0):
                results[index] = result = await one(samples[index])
                tracker.update(result)

    await asyncio.gather(*(worker() for _ in range(max(1, endpoint.concurrency))))
    done = [r for r in results if r is not None]
    assert len(done) == len(samples), "every decision has a result"
    return RunOutput(results=done, config=config, elapsed_s=time.perf_counter() - started)


async def run_with_retries(
    samples: Sequence[Sample],
    endpoint: Endpoint,
    config: ScoringConfig,
    *,
    client: Any,
    retries: int,
) -> tuple[list[DecisionResult], ScoringConfig]:
    """``run_decisions``, then up to ``retries`` more tries of the decisions that errored.

    The caller decides what errors left after that mean (the result order is the samples').
    """
    output = await run_decisions(samples, endpoint, config, client=client, progress=None)
    results, scoring = list(output.results), output.config
    for _ in range(retries):
        failed = [i for i, r in enumerate(results) if r.outcome is Outcome.ERROR]
        if not failed:
            break
        again = await run_decisions(
            [samples[i] for i in failed], endpoint, scoring, client=client, progress=None
        )
        for i, result in zip(failed, again.results, strict=True):
            results[i] = result
    return results, scoring


def by_context(samples: Sequence[Sample], *, start: int = 0) -> list[list[int]]:
    """Indices of ``samples[start:]`` grouped by context, contexts in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index in range(start, len(samples)):
        groups.setdefault(samples[index].context_id, []).append(index)
    return list(groups.values())
