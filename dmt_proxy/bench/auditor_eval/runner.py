"""Run an auditor over evaluation items with bounded concurrency and progress on stderr."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from dmt_proxy.audit.auditor import Auditor, AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.bench.auditor_eval.dataset import EvalItem
from dmt_proxy.bench.auditor_eval.metrics import Prediction
from dmt_proxy.errors import ConfigError

# Stop early when the auditor cannot be reached at all (wrong URL, model not served).
_ABORT_AFTER_INITIAL_ERRORS = 3


class ItemResult(BaseModel):
    """An item, the auditor's verdict (or the upstream error) and the wall time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item: EvalItem
    verdict: AuditVerdict | None = None
    error: str | None = None
    latency_s: float

    def prediction(self) -> Prediction:
        """The metric view of this result."""
        base = Prediction(
            item_id=self.item.id, biased=self.item.biased, domain=self.item.domain,
            strategy=self.item.strategy, kind=self.item.kind, latency_s=self.latency_s,
        )  # fmt: skip
        v = self.verdict
        if v is None:
            return base.model_copy(update={"outcome": "error", "reason": self.error})
        if not v.ok:
            update = {"outcome": "failed", "attempts": v.attempts, "reason": v.failure_reason}
            return base.model_copy(update=update)
        return base.model_copy(update={
            "outcome": "ok", "bias_detected": v.bias_detected, "bias_type": v.bias_type,
            "score": v.score, "attempts": v.attempts,
        })  # fmt: skip


def _describe(result: ItemResult, tau: float) -> str:
    v = result.verdict
    if v is None:
        return f"ERROR {result.error}"[:120]
    if not v.ok:
        return f"FAILED {v.failure_reason}"[:120]
    flag = "flagged" if v.bias_detected and v.score >= tau else "clean"
    return f"{flag} ({v.bias_type or '-'} {v.score:.2f})"


async def run_items(
    auditor: Auditor,
    items: Sequence[EvalItem],
    *,
    concurrency: int = 2,
    tau: float = 0.5,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
) -> list[ItemResult]:
    """Audit every item (at most ``concurrency`` at a time); results in item order."""
    semaphore = asyncio.Semaphore(max(1, concurrency))
    started = time.perf_counter()
    done = 0
    errors_at_start = 0

    async def one(item: EvalItem) -> ItemResult:
        nonlocal done, errors_at_start
        async with semaphore:
            t0 = time.perf_counter()
            try:
                verdict = await auditor.audit(AuditCandidate(text=item.text, candidate_id=item.id))
                result = ItemResult(item=item, verdict=verdict, latency_s=time.perf_counter() - t0)
            except AuditorUnavailable as exc:
                result = ItemResult(item=item, error=str(exc), latency_s=time.perf_counter() - t0)
        done += 1
        if result.error is not None and errors_at_start == done - 1:
            errors_at_start += 1
            if errors_at_start >= _ABORT_AFTER_INITIAL_ERRORS:
                raise ConfigError(f"the auditor model is unreachable: {result.error}")
        elapsed = time.perf_counter() - started
        eta = elapsed / done * (len(items) - done)
        progress(f"[{done}/{len(items)}] {item.id}: {_describe(result, tau)} "
                 f"{result.latency_s:.1f}s (eta {eta:.0f}s)")  # fmt: skip
        return result

    tasks = [asyncio.create_task(one(item)) for item in items]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
