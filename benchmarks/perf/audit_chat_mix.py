"""Audit throughput on a realistic chat mix, next to the machine's limit measured in the same run.

What runs: the proxy's own write path in process: a durable ``SqliteOutbox`` on disk, the
``OutboxWorker`` (concurrency 2, as the proxy runs it), the in-memory backend, and the
audit pipeline ``build_audit_pipeline`` builds from the shipped default policy
(``policies/default.yaml``: normalisation, the first judge (judge v2), the log-prob LLM
auditor on ``local/qwen2.5-1.5b``), its tags grounded where verdicts are stored. The
model is served by a llama-server this script starts (``--metrics``) and stops.

The mix (``benchmarks/audit_mix/chat_mix_v1.jsonl``): 150 messages, 80 % ordinary chat,
20 % group-related texts from the labelled sets' train splits. All are enqueued at once
(a backlog) and the worker drains them:

* sustained audits/s = N / (first enqueue until the outbox is empty);
* share decided by the first judge alone (no LLM call);
* the machine's limit, measured in the same run: prefill tokens/s of this llama-server
  (``PROBES`` sequential requests on fresh prompts, before the burst, read from the
  server's own ``timings``) and decode tokens/s; the tokens the server actually
  processed during the burst (``llamacpp:prompt_tokens_total``: cached prefix tokens are
  not counted) per LLM-judged memory. The LLM path's limit is
  ``prefill_tps / prompt_tokens_per_llm_memory`` audits/s (the issue's "prefill tokens/s
  x tokens per LLM-judged memory", read as a rate), and with decoding
  ``1 / (prompt_tokens/prefill_tps + decoded_tokens/decode_tps)``; the pipeline's limit
  divides that by the share of memories the LLM judged.

On a shared machine both numbers drop together; the load average is recorded at the
start and end, and a loaded run is a lower bound. Run (from the repository root)::

    nice -n 5 python benchmarks/perf/audit_chat_mix.py --conditions "..." \\
        --out benchmarks/results/perf/audit_chat_mix/audit_chat_mix
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _procs import start, stop  # noqa: E402
from _results import write_result  # noqa: E402
from audit_throughput import TimingAuditor  # noqa: E402

from dmt_bench.stats import percentile  # noqa: E402
from dmt_proxy.audit.schema import FIRST_STAGE_LABEL, TRAINED_JUDGE_LABEL, AuditCandidate  # noqa: E402
from dmt_proxy.audit.stages import build_audit_pipeline  # noqa: E402
from dmt_proxy.exchange import Exchange  # noqa: E402
from dmt_proxy.memory.backends.in_memory import InMemoryBackend  # noqa: E402
from dmt_proxy.memory.base import Scope  # noqa: E402
from dmt_proxy.memory.write.outbox import SqliteOutbox  # noqa: E402
from dmt_proxy.memory.write.worker import OutboxWorker, drain  # noqa: E402
from dmt_proxy.metrics import Metrics  # noqa: E402
from dmt_proxy.policy import Mode, load_policy  # noqa: E402
from dmt_proxy.settings import Settings  # noqa: E402
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel  # noqa: E402
from dmt_proxy.upstream.launcher import server_command  # noqa: E402
from dmt_proxy.upstream.local_models import LOCAL_MODELS  # noqa: E402
from dmt_proxy.upstream.models import ModelRegistry, local_model_port  # noqa: E402

BENCHMARK_VERSION = "audit_chat_mix_v1"
MIX = HERE.parent / "audit_mix" / "chat_mix_v1.jsonl"
TARGET_AUDITS_PER_S = 1.0
TARGET_WITHIN_LIMIT = 1.3
PROBES = 4
PROBE_TEXT = (
    "Probe {n}: a paragraph that shares no prefix with the auditor prompt, so every token "
    "is prefilled. The quick brown fox jumps over the lazy dog while the committee reviews "
    "quarterly figures, the weather turns, trains run late and someone bakes bread. "
)


def server_metrics(base: str) -> dict[str, float]:
    """llama-server's Prometheus counters (``--metrics``)."""
    with urllib.request.urlopen(f"{base}/metrics", timeout=30) as resp:
        text = resp.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            values[name.strip()] = float(value)
    return values


def probe_speeds(base: str, model: str) -> dict[str, float]:
    """Prefill and decode tokens/s from the server's own timings on fresh prompts."""
    prompt_tps: list[float] = []
    decode_tps: list[float] = []
    for n in range(PROBES):
        body = {
            "model": model, "max_tokens": 16, "temperature": 0, "cache_prompt": False,
            "messages": [{"role": "user", "content": PROBE_TEXT.format(n=n) * 3}],
        }  # fmt: skip
        req = urllib.request.Request(f"{base}/v1/chat/completions", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=600) as resp:
            timings = json.loads(resp.read())["timings"]
        prompt_tps.append(float(timings["prompt_per_second"]))
        decode_tps.append(float(timings["predicted_per_second"]))
    return {"prefill_tps": percentile(prompt_tps, 50), "decode_tps": percentile(decode_tps, 50),
            "prefill_tps_samples": prompt_tps, "decode_tps_samples": decode_tps}  # fmt: skip


async def run_mix(settings: Settings, items: list[dict[str, Any]], args: argparse.Namespace
                  ) -> dict[str, Any]:  # fmt: skip
    policy = load_policy(args.policy)
    registry = ModelRegistry(settings, policy, frozenset())
    chat = OpenAICompatChatModel()
    metrics = Metrics()
    pipeline = build_audit_pipeline(policy, registry, chat, metrics=metrics)
    if pipeline.first_stage is not None:  # load time is not audit time
        pipeline.first_stage.score_many(["warm up the embedding model"])
    if pipeline.judge is not None:
        pipeline.judge.score_sync(AuditCandidate(text="warm up the judge's encoder"))
    timing = TimingAuditor(pipeline)
    with tempfile.TemporaryDirectory() as tmp:
        outbox = SqliteOutbox(Path(tmp) / "outbox.sqlite3")
        backend = InMemoryBackend()
        worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory",
                              auditor=timing, policy=policy.audit, metrics=metrics,
                              concurrency=args.concurrency)  # fmt: skip
        scope = Scope(user="bench")
        started = time.time()
        enqueued: dict[str, float] = {}
        ids: dict[str, str] = {}
        for item in items:
            exchange = Exchange(scope=scope, query=item["text"], answer="OK.",
                                request_id=item["id"], mode=Mode.DMT)  # fmt: skip
            memory_id = await outbox.enqueue(exchange)
            enqueued[memory_id] = time.time()
            ids[memory_id] = item["id"]
        worker.start()
        drained = await drain(worker, timeout_s=args.max_wall_s)
        wall = time.time() - started
        await worker.stop()
        records = {r.id: r for r in await backend.list(scope)}
        await outbox.aclose()
    await chat.aclose()
    return {"policy": policy, "pipeline": pipeline, "timing": timing, "records": records,
            "enqueued": enqueued, "ids": ids, "wall": wall, "drained": drained}  # fmt: skip


ALONE = (FIRST_STAGE_LABEL, TRAINED_JUDGE_LABEL)
"""The verdict labels of a memory the first judge decided without the LLM (MiniLM, judge v2)."""


def summarise(items: list[dict[str, Any]], run: dict[str, Any], speeds: dict[str, Any],
              before: dict[str, float], after: dict[str, float], load_start: float,
              args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    timing: TimingAuditor = run["timing"]
    verdicts = timing.verdicts
    by_id = {i["id"]: i for i in items}
    llm = [k for k, v in verdicts.items() if v.auditor not in ALONE]
    done, wall = len(verdicts), run["wall"]

    def delta(name: str) -> float:
        return after.get(f"llamacpp:{name}", 0.0) - before.get(f"llamacpp:{name}", 0.0)

    prompt_tokens, decoded = delta("prompt_tokens_total"), delta("tokens_predicted_total")
    per_mem_prompt = prompt_tokens / len(llm) if llm else None
    per_mem_decode = decoded / len(llm) if llm else None
    prefill, decode = speeds["prefill_tps"], speeds["decode_tps"]
    llm_limit = prefill / per_mem_prompt if per_mem_prompt else None
    llm_limit_decode = (
        1.0 / (per_mem_prompt / prefill + (per_mem_decode or 0.0) / decode)
        if per_mem_prompt else None
    )  # fmt: skip
    llm_share = len(llm) / done if done else None
    llm_s = [verdicts[k].latency_s for k in llm]
    llm_rate = len(llm) / wall if wall > 0 else None
    records = run["records"]
    kinds: Counter[str] = Counter()
    statuses: Counter[str] = Counter()
    first_alone: Counter[str] = Counter()
    for memory_id, record in records.items():
        kind = by_id[run["ids"][memory_id]]["kind"]
        statuses[f"{kind}:{record.audit_status.value}"] += 1
    for memory_id, verdict in verdicts.items():
        kind = by_id[run["ids"][memory_id]]["kind"]
        kinds[kind] += 1
        if verdict.auditor in ALONE:
            first_alone[kind] += 1
    tags = [r.tag for r in records.values() if r.tag is not None and r.tag.bias_type is not None]
    # What the judge said for each tagged memory, so grounding can be replayed offline.
    judged = [
        {"id": run["ids"][mid], "text": by_id[run["ids"][mid]]["text"],
         "bias_type": rec.tag.bias_type, "judge_target_group": verdicts[mid].target_group,
         "judge_tendency": verdicts[mid].tendency, "judge_rationale": verdicts[mid].rationale,
         "target_group": rec.tag.target_group, "rationale": rec.tag.rationale}
        for mid, rec in records.items()
        if rec.tag is not None and rec.tag.bias_type is not None and mid in verdicts
    ]  # fmt: skip
    grounded = [t for t in tags if t.grounding is not None and t.grounding.grounded]
    kept = [t for t in tags if t.grounding is not None and t.grounding.rationale == "kept"]
    r = lambda x, n=3: None if x is None else round(x, n)  # noqa: E731
    return {
        "benchmark": BENCHMARK_VERSION,
        "run_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "mix": "chat_mix_v1", "n": len(items), "audited": done, "drained": run["drained"],
        "auditor": run["pipeline"].label, "first_stage": run["policy"].audit.first_stage,
        "concurrency": args.concurrency, "wall_s": r(wall, 1),
        "audits_per_s": r(done / wall if wall > 0 else None, 4),
        "first_stage_alone": sum(first_alone.values()),
        "first_stage_alone_share": r(sum(first_alone.values()) / done if done else None),
        "first_stage_alone_by_kind": {k: f"{first_alone[k]}/{kinds[k]}" for k in sorted(kinds)},
        "llm_judged": len(llm), "llm_share": r(llm_share),
        "llm_latency_p50_s": r(percentile(llm_s, 50), 2) if llm_s else None,
        "llm_latency_p95_s": r(percentile(llm_s, 95), 2) if llm_s else None,
        "llm_audits_per_s": r(llm_rate, 4),
        "prefill_tps": r(prefill, 1), "decode_tps": r(decode, 1),
        "prefill_tps_samples": [round(x, 1) for x in speeds["prefill_tps_samples"]],
        "decode_tps_samples": [round(x, 1) for x in speeds["decode_tps_samples"]],
        "server_prompt_tokens": int(prompt_tokens), "server_decoded_tokens": int(decoded),
        "prompt_tokens_per_llm_memory": r(per_mem_prompt, 1),
        "decoded_tokens_per_llm_memory": r(per_mem_decode, 1),
        "llm_limit_prefill_only": r(llm_limit, 4),
        "llm_limit_with_decode": r(llm_limit_decode, 4),
        "llm_path_vs_limit": r(llm_limit_decode / llm_rate if llm_rate and llm_limit_decode else None, 2),
        "pipeline_limit": r(llm_limit_decode / llm_share if llm_limit_decode and llm_share else None, 4),
        "statuses": dict(sorted(statuses.items())),
        "tags": len(tags), "tags_grounded": len(grounded), "rationales_kept": len(kept),
        "tagged": judged,
        "tag_examples": [
            {"target_group": t.target_group, "tendency": t.tendency[:120], "bias_type": t.bias_type,
             "grounding": None if t.grounding is None else t.grounding.model_dump(mode="json")}
            for t in tags[:8]
        ],
        "load_average_start": round(load_start, 2), "load_average_end": round(os.getloadavg()[0], 2),
        "cpus": os.cpu_count(), "conditions": args.conditions,
        "command": "nice -n 5 python benchmarks/perf/audit_chat_mix.py " + shlex.join(sys.argv[1:]),
    }  # fmt: skip


def render(res: dict[str, Any]) -> str:
    """The markdown report."""
    met = (res["audits_per_s"] or 0) >= TARGET_AUDITS_PER_S
    ratio = res["llm_path_vs_limit"]
    within = ratio is not None and ratio <= TARGET_WITHIN_LIMIT
    return "\n".join([
        f"# Audit throughput on a chat mix (benchmark `{res['benchmark']}`)",
        "",
        f"Measured {res['run_at']} on {res['cpus']} CPUs; 1-min load average "
        f"{res['load_average_start']} at the start, {res['load_average_end']} at the end. "
        f"{res['conditions']}".rstrip(),
        "",
        f"Rerun: `{res['command']}`",
        "",
        f"`{res['mix']}` ({res['n']} messages: 80 % ordinary chat, 20 % group-related texts "
        "from the labelled sets' train splits) enqueued at once in the durable outbox and "
        f"drained by the proxy's worker (concurrency {res['concurrency']}) through the audit "
        f"pipeline of `policies/default.yaml` (first stage `{res['first_stage']}`, "
        f"`{res['auditor']}`), on a llama-server started by the benchmark.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| audited / enqueued | {res['audited']} / {res['n']} (drained: {res['drained']}) |",
        f"| wall s | {res['wall_s']} |",
        f"| **sustained audits per second** | **{res['audits_per_s']}** (target >= "
        f"{TARGET_AUDITS_PER_S}: {'met' if met else 'NOT met'}) |",
        f"| decided by the first stage alone | {res['first_stage_alone']} "
        f"({res['first_stage_alone_share']}); by kind {res['first_stage_alone_by_kind']} |",
        f"| judged by the LLM | {res['llm_judged']} (share {res['llm_share']}); "
        f"{res['llm_audits_per_s']} LLM audits/s; latency p50 / p95 "
        f"{res['llm_latency_p50_s']} / {res['llm_latency_p95_s']} s |",
        f"| prefill / decode tokens/s (server timings, {PROBES} fresh prompts, median) | "
        f"{res['prefill_tps']} / {res['decode_tps']} |",
        f"| tokens the server prefilled / decoded per LLM-judged memory | "
        f"{res['prompt_tokens_per_llm_memory']} / {res['decoded_tokens_per_llm_memory']} |",
        f"| LLM path limit: prefill only / with decode (audits/s) | "
        f"{res['llm_limit_prefill_only']} / {res['llm_limit_with_decode']} |",
        f"| LLM path: limit (with decode) / achieved | {ratio} (target <= "
        f"{TARGET_WITHIN_LIMIT}: {'met' if within else 'NOT met'}) |",
        f"| pipeline limit (LLM limit / LLM share) | {res['pipeline_limit']} audits/s |",
        f"| final statuses (kind:status) | {res['statuses']} |",
        f"| tags / grounded target_group / rationale kept | {res['tags']} / "
        f"{res['tags_grounded']} / {res['rationales_kept']} |",
        "",
        "The limit is measured on the same server in the same run, so load from other "
        "processes lowers both; on a loaded machine the audits/s is a lower bound.",
        "",
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Start the model server, run the mix, write json and md, stop the server."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--policy", type=Path, default=None)
    parser.add_argument("--port-base", type=int, default=8960)
    parser.add_argument("--limit", type=int, default=0, help="only the first N messages")
    parser.add_argument(
        "--kind",
        choices=["ordinary", "group"],
        default=None,
        help="only messages of this kind (a live check, not the mix)",
    )
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-wall-s", type=float, default=7200.0)
    parser.add_argument("--conditions", default="")
    parser.add_argument(
        "--out", type=Path, default=Path("benchmarks/results/perf/audit_chat_mix/audit_chat_mix")
    )
    args = parser.parse_args(argv)
    items = [json.loads(line) for line in MIX.read_text(encoding="utf-8").splitlines()]
    items = [i for i in items if args.kind is None or i["kind"] == args.kind]
    items = items[: args.limit] if args.limit else items
    with tempfile.TemporaryDirectory() as state:
        settings = Settings(state_dir=Path(state), models_port_base=args.port_base)
        model = LOCAL_MODELS[args.model]
        base = f"http://127.0.0.1:{local_model_port(settings, args.model)}"
        cmd = ["nice", "-n", "5", *server_command(settings, model), "--metrics"]
        proc = start(cmd, f"{base}/health", Path(state) / "llama-server.log", timeout_s=300)
        try:
            load_start = os.getloadavg()[0]
            speeds = probe_speeds(base, args.model)
            before = server_metrics(base)
            run = asyncio.run(run_mix(settings, items, args))
            after = server_metrics(base)
        finally:
            stop(proc)
    result = summarise(items, run, speeds, before, after, load_start, args)
    write_result(args.out, result, render(result), indent=1, ensure_ascii=False)
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
