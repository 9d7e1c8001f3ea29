"""Outbox audit throughput: how many memory writes per second the write path audits.

The proxy's own write path, in process: a durable ``Outbox`` (SQLite, on disk), the
``OutboxWorker`` (concurrency 2, as the proxy runs it), the in-memory backend, and
the audit pipeline the default policy builds (normalisation, the embedding first
stage as second judge, the log-prob LLM auditor on a local llama-server). A burst
of N memories is enqueued at once (a backlog), and the worker drains it:

* sustained throughput = N / (time from the first enqueue until the outbox is empty);
* audit latency = each LLM-judged memory's auditor time (p50, p95), and the time
  from enqueue to its final status (which includes waiting in the backlog).

Memories: a stratified subset of ``auditor_eval_v2``'s test split (half biased).
Run::

    python benchmarks/perf/audit_throughput.py --base-url http://127.0.0.1:8092/v1 \\
        --model qwen2.5-1.5b --n 40 --out benchmarks/results/perf/audit_throughput/audit_throughput
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.auditor_eval.dataset import DATASET_V2, dataset_path, load_items, select
from dmt_bench.stats import percentile
from dmt_proxy.audit.auditor import AuditorOptions, LLMAuditor
from dmt_proxy.audit.first_stage import EmbeddingFirstStage
from dmt_proxy.audit.schema import FIRST_STAGE_LABEL, AuditCandidate, AuditVerdict
from dmt_proxy.audit.stages import StagedAuditor
from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.worker import OutboxWorker, drain
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Mode, load_policy
from dmt_proxy.upstream.base import ModelEndpoint
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel

BENCHMARK_VERSION = "audit_throughput_v1"
TARGET_AUDITS_PER_S = 1.0


class TimingAuditor:
    """Wraps the pipeline to record each memory's verdict and when it was decided (for
    latency and outcomes; `audit_chat_mix.py` uses it too)."""

    def __init__(self, inner: StagedAuditor) -> None:
        self.inner = inner
        self.verdicts: dict[str, AuditVerdict] = {}
        self.finished_at: dict[str, float] = {}

    async def audit(self, candidate: AuditCandidate) -> AuditVerdict:
        verdict = await self.inner.audit(candidate)
        self.verdicts[candidate.candidate_id] = verdict
        self.finished_at[candidate.candidate_id] = time.time()
        return verdict


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    policy = load_policy(args.policy)
    items = select(load_items(dataset_path(DATASET_V2)), split="test", limit=args.n, seed=args.seed)
    endpoint = ModelEndpoint(name=f"local/{args.model}", model=f"openai/{args.model}",
                             api_base=args.base_url, api_key="local", timeout_s=args.timeout)  # fmt: skip
    chat = OpenAICompatChatModel()
    rationale = policy.audit.rationale and not args.no_rationale
    options = AuditorOptions(verdict=policy.audit.verdict, rationale=rationale)
    llm = LLMAuditor(chat, endpoint, options=options,
                     prompt_version=policy.audit.auditor_prompt, policy=policy.audit)  # fmt: skip
    first_stage = EmbeddingFirstStage(LocalEmbedder())
    first_stage.score_many(["warm up the embedding model"])  # load time is not audit time
    timing = TimingAuditor(StagedAuditor(llm, first_stage=first_stage))
    metrics = Metrics()
    with tempfile.TemporaryDirectory() as tmp:
        outbox = SqliteOutbox(Path(tmp) / "outbox.sqlite3")
        backend = InMemoryBackend()
        worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory",
                              auditor=timing, policy=policy.audit, metrics=metrics,
                              concurrency=args.concurrency)  # fmt: skip
        scope = Scope(user="bench")
        load_start = os.getloadavg()[0]
        started = time.time()
        enqueued: dict[str, float] = {}
        for item in items:
            exchange = Exchange(scope=scope, query=item.text, answer="OK.", request_id=item.id,
                                mode=Mode.DMT)  # fmt: skip
            memory_id = await outbox.enqueue(exchange)
            enqueued[memory_id] = time.time()
        worker.start()
        drained = await drain(worker, timeout_s=args.max_wall_s)
        wall = time.time() - started
        await worker.stop()
        records = await backend.list(scope)
        await outbox.aclose()
    await chat.aclose()
    llm_latency = [v.latency_s for v in timing.verdicts.values() if v.auditor != FIRST_STAGE_LABEL]
    to_status = [timing.finished_at[k] - enqueued[k] for k in timing.finished_at if k in enqueued]
    done = len(timing.verdicts)
    return {
        "benchmark": BENCHMARK_VERSION,
        "run_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": args.model, "auditor": llm.label, "n": len(items), "audited": done,
        "drained": drained, "wall_s": round(wall, 1),
        "audits_per_s": round(done / wall, 4) if wall > 0 else None,
        "llm_calls": len(llm_latency),
        "llm_latency_p50_s": round(percentile(llm_latency, 50), 2) if llm_latency else None,
        "llm_latency_p95_s": round(percentile(llm_latency, 95), 2) if llm_latency else None,
        "enqueue_to_status_p50_s": round(percentile(to_status, 50), 1) if to_status else None,
        "enqueue_to_status_p95_s": round(percentile(to_status, 95), 1) if to_status else None,
        "statuses": dict(Counter(r.audit_status.value for r in records)),
        "concurrency": args.concurrency, "rationale": rationale,
        "load_average_start": round(load_start, 2),
        "load_average_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(),
        "command": "python benchmarks/perf/audit_throughput.py " + " ".join(sys.argv[1:]),
        "conditions": args.conditions,
    }  # fmt: skip


def render(result: dict[str, Any]) -> str:
    met = (result["audits_per_s"] or 0) >= TARGET_AUDITS_PER_S
    r = result
    return "\n".join([
        f"# Outbox audit throughput (benchmark `{r['benchmark']}`)",
        "",
        f"Measured {r['run_at']} on {r['cpus']} CPUs; 1-min load average {r['load_average_start']} "
        f"at the start, {r['load_average_end']} at the end. {r['conditions']}".rstrip(),
        "",
        f"Rerun: `{r['command']}`",
        "",
        f"A burst of {r['n']} memories (auditor_eval_v2 test split, stratified, half biased) "
        f"enqueued in the durable outbox and drained by the proxy's worker (concurrency "
        f"{r['concurrency']}) through the default audit pipeline: normalisation, embedding "
        f"first stage, `{r['auditor']}`; "
        + ("a rationale turn for each tagged memory (the default)."
           if r.get("rationale", True) else "no rationale turn (`audit.rationale: false`)."),
        "",
        "| measure | value |",
        "|---|---|",
        f"| audited / enqueued | {r['audited']} / {r['n']} (drained: {r['drained']}) |",
        f"| wall s | {r['wall_s']} |",
        f"| **sustained audits per second** | **{r['audits_per_s']}** (target "
        f">= {TARGET_AUDITS_PER_S}: {'met' if met else 'NOT met'}) |",
        f"| memories that needed the LLM | {r['llm_calls']} |",
        f"| LLM audit latency p50 / p95 s | {r['llm_latency_p50_s']} / {r['llm_latency_p95_s']} |",
        f"| enqueue to final status p50 / p95 s (includes the backlog) | "
        f"{r['enqueue_to_status_p50_s']} / {r['enqueue_to_status_p95_s']} |",
        f"| final statuses | {r['statuses']} |",
        "",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8092/v1")
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--policy", type=Path, default=None)
    parser.add_argument("--n", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--max-wall-s", type=float, default=7200.0)
    parser.add_argument("--conditions", default="")
    parser.add_argument(
        "--no-rationale",
        action="store_true",
        help="tagged memories get no rationale turn (policy audit.rationale: false)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("benchmarks/results/perf/audit_throughput/audit_throughput"),
    )
    args = parser.parse_args(argv)
    result = asyncio.run(measure(args))
    write_result(args.out, result, render(result), indent=1)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
