"""The LangMem backend's two consolidation managers on one fixed conversation.

The conversation (``benchmarks/memory_conversations/langmem_manager_v1.json``): one
user's turns with facts, an update (a move) and a correction (the cat's coat),
written one turn at a time to a fresh ``langmem`` backend with ``consolidate=True``
and ``manager=json`` (our constrained-JSON plan) or ``manager=langmem`` (the
``langmem`` package's ``create_memory_store_manager``, driven through
``memory.backends.langchain_chat.ProxyChatModel`` and the proxy's local tool-call layer).
The model is an embedded one, reached directly at its llama-server through the
OpenAI-compatible client, as the proxy's default client does.

Per path: the latency of each ``write`` (the verbatim put plus the manager run;
p50/p95), the manager's failures (a failed run never fails the write, it is
counted), model calls, the consolidated memories' texts, and fact recall: for each
question of the file's ``recall`` list, whether one of its answers appears (case-
insensitive, as a whole word) in a consolidated text. ``superseded`` counts stale
facts still stored. The managers run interleaved, turn by turn (who goes first
alternates), each on its own fresh store, so both meet the same machine load; the
1-minute load average is recorded after each write: the models are shared, so
latency is only comparable within one run.

Each model's result is kept in ``<run-dir>/<model>__<managers>.json``, rewritten
after every turn; a rerun skips finished models and starts unfinished ones over.

Run:  python benchmarks/perf/langmem_manager.py --models qwen2.5-1.5b \\
          --managers json,langmem --run-dir /tmp/langmem_manager --write
Writes benchmarks/results/langmem_manager/langmem_manager.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.stats import percentile
from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.memory.backends.langmem_backend import LangMemBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BACKEND_LLM_TIMEOUT_S, BackendConfig, create_backend
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel

ROOT = Path(__file__).resolve().parents[1]
CONVERSATION = ROOT / "memory_conversations" / "langmem_manager_v1.json"
RESULTS = ROOT / "results"
PORTS = {"qwen2.5-0.5b": 8091, "qwen2.5-1.5b": 8092, "smollm2": 8093}


class CountingChatModel:
    """Counts the calls (and their tokens) that reach the inner model."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.calls = 0
        self.errors = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """The inner completion, counted."""
        self.calls += 1
        try:
            reply = await self.inner.complete(call)
        except Exception:
            self.errors += 1  # trustcall retries after an error without a trace
            raise
        if reply.usage is not None:
            self.prompt_tokens += reply.usage.prompt_tokens or 0
            self.completion_tokens += reply.usage.completion_tokens or 0
        return reply

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """The inner stream, counted as one call."""
        self.calls += 1
        async for chunk in self.inner.stream(call):
            yield chunk


def nearest_rank(values: list[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100, ``stats.percentile``'s nearest rank); None for no values."""
    return percentile(values, q, method="nearest_rank") if values else None


def found(texts: list[str], answers: list[str]) -> bool:
    """True when one of ``answers`` is a whole word (case-insensitive) of one of ``texts``."""
    return any(
        re.search(rf"\b{re.escape(a)}\b", t, flags=re.IGNORECASE) for a in answers for t in texts
    )


class ManagerRun:
    """One manager's backend (fresh store) and what its writes cost."""

    def __init__(self, model: str, manager: str, timeout_s: float, state: Path) -> None:
        self.model, self.manager = model, manager
        self.endpoint = ModelEndpoint(
            name=f"local/{model}", model=f"openai/{model}", api_key="local", kind="local",
            api_base=f"http://127.0.0.1:{PORTS[model]}/v1", timeout_s=timeout_s,
        )  # fmt: skip
        self.client = OpenAICompatChatModel()
        self.chat = CountingChatModel(self.client)
        self.state = state
        self.writes: list[dict[str, Any]] = []
        self.backend: LangMemBackend | None = None

    async def open(self, embedder: LocalEmbedder) -> None:
        """A fresh langmem backend with consolidation by this manager."""
        config = BackendConfig(
            state_dir=self.state, embedder=embedder, chat=self.chat, llm=self.endpoint,
            options={"consolidate": True, "manager": self.manager},
        )  # fmt: skip
        backend = await create_backend("langmem", config)
        assert isinstance(backend, LangMemBackend)
        self.backend = backend

    async def write(self, scope: Scope, turn: dict[str, str]) -> None:
        """One turn, timed, with the manager's failures and model calls it caused."""
        assert self.backend is not None
        failures, calls = self.backend.stats.failures, self.chat.calls
        record = MemoryRecord.from_interaction(scope, turn["user"], turn["assistant"])
        started = time.perf_counter()
        await self.backend.write(scope, record)
        seconds = time.perf_counter() - started
        self.writes.append({"turn": turn["user"], "seconds": round(seconds, 2),
                            "failed": self.backend.stats.failures > failures,
                            "model_calls": self.chat.calls - calls,
                            "load_1min": round(os.getloadavg()[0], 2)})  # fmt: skip
        print(f"{self.model} {self.manager}: {self.writes[-1]}", file=sys.stderr)

    async def close(self) -> None:
        """Close the backend and the client."""
        if self.backend is not None:
            await self.backend.close()
        await self.client.aclose()

    async def result(self, scope: Scope, spec: dict[str, Any]) -> dict[str, Any]:
        """The path's numbers and stored memories so far."""
        assert self.backend is not None
        stored = [
            r.text
            for r in await self.backend.list(scope)
            if r.metadata.get("kind") == "consolidated"
        ]
        stats = self.backend.stats
        latencies = [w["seconds"] for w in self.writes]
        recall = [{"question": q["question"], "found": found(stored, q["any"])}
                  for q in spec["recall"]]  # fmt: skip
        stale = [{"fact": s["fact"], "stored": found(stored, s["any"])} for s in spec["superseded"]]
        loads = [w["load_1min"] for w in self.writes]
        return {
            "model": self.model, "manager": self.manager, "timeout_s": self.endpoint.timeout_s,
            "writes": self.writes,
            "latency_p50_s": nearest_rank(latencies, 50),
            "latency_p95_s": nearest_rank(latencies, 95),
            "latency_mean_s": round(statistics.fmean(latencies), 2) if latencies else None,
            "failures": stats.failures, "model_calls": self.chat.calls,
            "model_call_errors": self.chat.errors,
            "prompt_tokens": self.chat.prompt_tokens,
            "completion_tokens": self.chat.completion_tokens,
            "created": stats.created, "updated": stats.updated, "stored": stored,
            "recall": recall, "recall_hits": sum(r["found"] for r in recall),
            "recall_n": len(recall), "superseded": stale,
            "load_1min_min": min(loads, default=None), "load_1min_max": max(loads, default=None),
        }  # fmt: skip


async def run_model(
    model: str, managers: list[str], spec: dict[str, Any], timeout_s: float, out: Path
) -> None:
    """The conversation through every manager, interleaved turn by turn (same load for each).

    ``out`` is rewritten after every turn (``complete`` false until the last one), so a
    stopped run still reports the turns it finished.
    """
    scope = Scope(user=spec["user"])
    embedder = LocalEmbedder()
    with tempfile.TemporaryDirectory() as state:
        runs = [ManagerRun(model, m, timeout_s, Path(state) / m) for m in managers]
        try:
            for run in runs:
                await run.open(embedder)
            for i, turn in enumerate(spec["turns"]):
                # Alternate who goes first, so neither always meets a warmer cache.
                for run in runs if i % 2 == 0 else runs[::-1]:
                    await run.write(scope, turn)
                done = i == len(spec["turns"]) - 1
                rows = [{**await run.result(scope, spec), "complete": done} for run in runs]
                out.write_text(json.dumps(rows, indent=1))
        finally:
            for run in runs:
                await run.close()


def report(rows: list[dict[str, Any]], command: str) -> str:
    """The Markdown table and each path's stored memories."""
    lines = [
        "# LangMem backend: the JSON manager and langmem's own manager", "",
        f"Command: `{command}`  ",
        f"Conversation: `{CONVERSATION.relative_to(ROOT.parent)}` (one user, "
        f"{len(rows[0]['writes']) if rows else 0} turns). Models shared with other work on a "
        "2-core machine: compare latency within this table only.", "",
        "| model | manager | write p50 s | write p95 s | failures | model calls | created "
        "| updated | prompt / completion tokens | recall | stale kept | load 1 min (min-max) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]  # fmt: skip
    for r in rows:
        stale = sum(s["stored"] for s in r["superseded"])
        lines.append(
            f"| {r['model']} | {r['manager']} | {r['latency_p50_s']} | {r['latency_p95_s']} "
            f"| {r['failures']}/{len(r['writes'])} "
            f"| {r['model_calls']} ({r['model_call_errors']} errors) | {r['created']} "
            f"| {r['updated']} | {r['prompt_tokens']} / {r['completion_tokens']} "
            f"| {r['recall_hits']}/{r['recall_n']} | {stale} "
            f"| {r['load_1min_min']}-{r['load_1min_max']} |"
        )
    for r in rows:
        turns = "" if r["complete"] else f" (stopped after {len(r['writes'])} turns)"
        lines += ["", f"## {r['model']}, manager `{r['manager']}`{turns}: stored memories", ""]
        lines += [f"- {json.dumps(t)}" for t in r["stored"]] or ["(none)"]
        missed = [q["question"] for q in r["recall"] if not q["found"]]
        lines += ["", f"Missed: {'; '.join(missed) if missed else 'none'}"]
    return "\n".join(lines) + "\n"


async def main() -> None:
    """Run the paths not yet in the run directory, then (``--write``) the report."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen2.5-1.5b")
    ap.add_argument("--managers", default="json,langmem")
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--timeout-s", type=float, default=BACKEND_LLM_TIMEOUT_S,
                    help="per model call (default: the proxy's backend model timeout)")  # fmt: skip
    ap.add_argument("--report-only", action="store_true", help="ask nothing; tabulate the run")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    spec = json.loads(CONVERSATION.read_text())
    args.run_dir.mkdir(parents=True, exist_ok=True)
    rows = []
    managers = args.managers.split(",")
    for model in args.models.split(","):
        out = args.run_dir / f"{model}__{'_'.join(managers)}.json"
        done = out.exists() and all(r["complete"] for r in json.loads(out.read_text()))
        if not done and not args.report_only:
            await run_model(model, managers, spec, args.timeout_s, out)
        if out.exists():
            rows.extend(json.loads(out.read_text()))
    command = (
        f"python benchmarks/perf/langmem_manager.py --models {args.models} "
        f"--managers {args.managers} --timeout-s {args.timeout_s:g} --run-dir {args.run_dir} --write"
    )
    md = report(rows, command)
    print(md)
    if args.write:
        summary = {"conversation": str(CONVERSATION.relative_to(ROOT.parent)),
                   "version": spec["version"], "command": command, "paths": rows}  # fmt: skip
        write_result(RESULTS / "langmem_manager" / "langmem_manager", summary, md, indent=1)


if __name__ == "__main__":
    asyncio.run(main())
