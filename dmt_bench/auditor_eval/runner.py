"""Run an auditor over evaluation items with bounded concurrency and progress on stderr.

Long runs are resumable: with ``checkpoint`` every finished item is appended to a
JSONL file as it completes, and a rerun with the same file skips the items already
there (results are returned in item order either way).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.auditor_eval.metrics import Prediction
from dmt_bench.jsonl import append_record, read_records
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.protocol import Auditor, AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.tags import AuditStatus

# Stop early when the auditor cannot be reached at all (wrong URL, model not served).
_ABORT_AFTER_INITIAL_ERRORS = 3


class ItemResult(BaseModel):
    """An item, the auditor's verdict (or the upstream error) and the wall time."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    item: EvalItem
    verdict: AuditVerdict | None = None
    error: str | None = None
    latency_s: float

    def prediction(self, policy: AuditPolicy | None = None) -> Prediction:
        """The metric view of this result (the decision under ``policy``: disputes and
        manipulation findings flag an item whatever tau, and the tag's domain is the vote)."""
        policy = policy or AuditPolicy()
        base = Prediction(
            item_id=self.item.id, biased=self.item.biased, domain=self.item.domain,
            strategy=self.item.strategy, kind=self.item.kind, latency_s=self.latency_s,
            form=self.item.form, setting=self.item.setting,
        )  # fmt: skip
        v = self.verdict
        if v is None:
            return base.model_copy(update={"outcome": "error", "reason": self.error})
        if not v.ok:
            update = {"outcome": "failed", "attempts": v.attempts, "reason": v.failure_reason}
            return base.model_copy(update=update)
        decision = decide(v, policy)
        forced = decision.status is AuditStatus.DISPUTED or v.manipulation
        voted = decision.tag.bias_type if decision.tag is not None else None
        return base.model_copy(update={
            "outcome": "ok", "bias_detected": v.bias_detected,
            "bias_type": voted or (v.bias_type if v.bias_detected else None),
            # The repair count is a JSON-path notion; log-prob verdicts make extra calls
            # (the group, the rationale) by design.
            "score": v.score, "attempts": v.attempts if v.p_raw is None else 1, "forced": forced,
            "llm_call": not v.decided_by_first_stage,
        })  # fmt: skip


def _describe(result: ItemResult, tau: float) -> str:
    v = result.verdict
    if v is None:
        return f"ERROR {result.error}"[:120]
    if not v.ok:
        return f"FAILED {v.failure_reason}"[:120]
    status = decide(v, AuditPolicy(tau=tau)).status.value
    return f"{status} ({v.bias_type or '-'} {v.score:.2f})"


def load_checkpoint(path: Path) -> dict[str, ItemResult]:
    """Results already in a checkpoint file, by item id (a torn last line is ignored)."""
    return {r.item.id: r for r in read_records(path, ItemResult)}


async def run_items(
    auditor: Auditor,
    items: Sequence[EvalItem],
    *,
    concurrency: int = 2,
    tau: float = 0.5,
    progress: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True),
    checkpoint: Path | None = None,
) -> list[ItemResult]:
    """Audit every item (at most ``concurrency`` at a time); results in item order."""
    semaphore = asyncio.Semaphore(max(1, concurrency))
    started = time.perf_counter()
    finished = load_checkpoint(checkpoint) if checkpoint is not None else {}
    todo = [item for item in items if item.id not in finished]
    if finished:
        progress(f"resuming: {len(items) - len(todo)} of {len(items)} items already done")
    done = 0
    errors_at_start = 0

    def save(result: ItemResult) -> None:
        if checkpoint is not None and result.error is None:
            append_record(checkpoint, result)

    async def one(item: EvalItem) -> ItemResult:
        nonlocal done, errors_at_start
        async with semaphore:
            t0 = time.perf_counter()
            try:
                said, answer = item.spoken()
                candidate = AuditCandidate(text=said, reply=answer, candidate_id=item.id)
                verdict = await auditor.audit(candidate)
                result = ItemResult(item=item, verdict=verdict, latency_s=time.perf_counter() - t0)
            except AuditorUnavailable as exc:
                result = ItemResult(item=item, error=str(exc), latency_s=time.perf_counter() - t0)
        done += 1
        save(result)
        if result.error is not None and errors_at_start == done - 1:
            errors_at_start += 1
            if errors_at_start >= _ABORT_AFTER_INITIAL_ERRORS:
                raise ConfigError(f"the auditor model is unreachable: {result.error}")
        elapsed = time.perf_counter() - started
        eta = elapsed / done * (len(todo) - done)
        progress(f"[{done}/{len(todo)}] {item.id}: {_describe(result, tau)} "
                 f"{result.latency_s:.1f}s (eta {eta:.0f}s)")  # fmt: skip
        return result

    tasks = [asyncio.create_task(one(item)) for item in todo]
    try:
        fresh = {r.item.id: r for r in await asyncio.gather(*tasks)}
        return [finished.get(item.id) or fresh[item.id] for item in items]
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
