"""Valid structured tool calls from an embedded model on the fixed tool-task set.

The tasks (``benchmarks/tool_tasks/tasks_v<N>.json``, ``--tasks``; v1 by default):
single call (one tool offered), choice between six tools, no tool needed (answered
in text), and two calls in sequence (the second asked with the first call and a scripted result in the
history, as an agent would send it). Each request goes through the proxy's
local tool-call layer (``upstream.local_tools.LocalToolsChatModel``) to the
model's llama-server, temperature 0; even-numbered tasks are streamed, odd ones not.

A step is valid when the reply calls the expected tool with arguments that validate
against its schema (or, for "no tool", answers in text with no tool call); a task is
valid when all its steps are. ``args match`` also checks the expected argument
values (case-insensitive strings) and, for v2's memory tasks, that each word in
``contains`` occurs in its argument (the stored fact). Rows are appended to ``<run-dir>/<model>.jsonl``;
a rerun skips finished tasks.

Run:  python benchmarks/perf/tool_calls.py --model qwen2.5-1.5b --run-dir /tmp/toolcalls --write
Writes benchmarks/results/tool_calls/tool_calls_<model>.{json,md}; with ``--label L``,
tool_calls_<model>_<tasks stem>_<L>.{json,md}. ``--no-decision`` turns off the local
tool-or-text decision (``upstream.tool_decision``), as the proxy was before it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.stats import wilson_interval
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel
from dmt_proxy.upstream.local_tools import LocalToolsChatModel

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tool_tasks" / "tasks_v1.json"
RESULTS = ROOT / "results"
PORTS = {"qwen2.5-0.5b": 8091, "qwen2.5-1.5b": 8092, "smollm2": 8093}


def tool_defs(spec: dict[str, Any], names: list[str]) -> list[dict[str, Any]]:
    """OpenAI ``tools`` for ``names``."""
    return [{"type": "function", "function": {"name": n, **spec["tools"][n]}} for n in names]


def collect(chunks: list[ChatCompletionChunk]) -> dict[str, Any]:
    """The assistant message a client assembles from stream chunks."""
    text, calls = "", []
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content if isinstance(choice.delta.content, str) else ""
            for call in choice.delta.tool_calls or []:
                fn = call.function
                calls.append({"id": call.id, "type": "function",
                              "function": {"name": fn and fn.name,
                                           "arguments": fn and fn.arguments}})  # fmt: skip
    return {"role": "assistant", "content": text or None, "tool_calls": calls or None}


def as_message(reply: ChatCompletion) -> dict[str, Any]:
    """The assistant message of a completion, as a client would append it."""
    msg = reply.choices[0].message
    calls = [c.model_dump(exclude_none=True) for c in msg.tool_calls or []]
    content = msg.content if isinstance(msg.content, str) else None
    return {"role": "assistant", "content": content, "tool_calls": calls or None}


def _same(want: object, got: object) -> bool:
    if isinstance(want, str) and isinstance(got, str):
        return want.strip().lower() == got.strip().lower()
    if isinstance(want, (int, float)) and isinstance(got, (int, float)):
        return float(want) == float(got)
    return want == got


def judge(spec: dict[str, Any], expect: dict[str, Any], msg: dict[str, Any]) -> dict[str, Any]:
    """Valid / args-match verdict of one assistant message."""
    calls = msg.get("tool_calls") or []
    want = expect.get("name")
    if want is None:
        ok = not calls and bool((msg.get("content") or "").strip())
        return {"valid": ok, "args_match": ok, "got": calls or msg.get("content")}
    if len(calls) != 1 or calls[0]["function"]["name"] != want:
        return {"valid": False, "args_match": False, "got": calls or msg.get("content")}
    try:
        args = json.loads(calls[0]["function"]["arguments"] or "")
    except json.JSONDecodeError:
        return {"valid": False, "args_match": False, "got": calls}
    valid = Draft202012Validator(spec["tools"][want]["parameters"]).is_valid(args)
    match = valid and all(_same(v, args.get(k)) for k, v in expect.get("arguments", {}).items())
    match = match and all(
        isinstance(args.get(k), str) and all(w.lower() in args[k].lower() for w in words)
        for k, words in expect.get("contains", {}).items()
    )
    return {"valid": valid, "args_match": match, "got": args}


async def ask(model: LocalToolsChatModel, call: UpstreamCall, stream: bool) -> dict[str, Any]:
    """One request through the local tool layer; the assistant message."""
    if stream:
        return collect([c async for c in model.stream(call)])
    return as_message(await model.complete(call))


async def run_task(model: LocalToolsChatModel, ep: ModelEndpoint, spec: dict[str, Any],
                   task: dict[str, Any], stream: bool) -> dict[str, Any]:  # fmt: skip
    """Every step of ``task``; stops at the first invalid one."""
    names = list(spec["tools"]) if task["tools"] == "all" else task["tools"]
    params = {"tools": tool_defs(spec, names), "temperature": 0, "max_tokens": 160}
    messages: list[dict[str, Any]] = [{"role": "user", "content": task["prompt"]}]
    steps = task.get("steps") or [{"expect": task.get("expect", {"name": None})}]
    verdicts = []
    started = time.perf_counter()
    for i, step in enumerate(steps):
        msg = await ask(model, UpstreamCall(ep, list(messages), params), stream)
        verdict = judge(spec, step["expect"], msg)
        verdicts.append(verdict)
        if not verdict["valid"] or i == len(steps) - 1:
            break
        messages.append({k: v for k, v in msg.items() if v is not None})
        call_id = msg["tool_calls"][0]["id"]
        messages.append({"role": "tool", "tool_call_id": call_id, "content": step["result"]})
    complete = len(verdicts) == len(steps)
    return {"id": task["id"], "kind": task["kind"], "stream": stream,
            "valid": complete and all(v["valid"] for v in verdicts),
            "args_match": complete and all(v["args_match"] for v in verdicts),
            "steps": verdicts, "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip


def table(model_name: str, rows: list[dict[str, Any]], command: str, tasks: Path,
          how: str = "") -> tuple[dict[str, Any], str]:  # fmt: skip
    """Valid-call rate per kind (in order of first appearance) and overall, with Wilson intervals."""
    kinds = list(dict.fromkeys(r["kind"] for r in rows))
    where = tasks.resolve().relative_to(ROOT.parent)
    summary: dict[str, Any] = {"model": model_name, "tasks": str(where), "by_kind": {}}
    lines = [f"# Structured tool calls: local/{model_name}", "", f"Command: `{command}`  ",
             f"Tasks: `{where}`; through `upstream.local_tools` to "
             f"llama-server, temperature 0; even tasks streamed{how}.", "",
             "| kind | valid | n | valid rate | Wilson 95 % CI | args match |",
             "|---|---:|---:|---:|---|---:|"]  # fmt: skip
    for kind in [*kinds, "all"]:
        sel = [r for r in rows if kind == "all" or r["kind"] == kind]
        k, n = sum(r["valid"] for r in sel), len(sel)
        m = sum(r["args_match"] for r in sel)
        ci = wilson_interval(k, n)
        summary["by_kind"][kind] = {"valid": k, "n": n, "args_match": m,
                                    "ci95": [ci.low, ci.high]}  # fmt: skip
        rate = f"{k / n:.3f}" if n else "–"
        lines.append(f"| {kind} | {k} | {n} | {rate} | [{ci.low:.3f}, {ci.high:.3f}] | {m} |")
    summary["rows"] = rows
    return summary, "\n".join(lines) + "\n"


async def main() -> None:
    """Run the task set (resumable) and print or write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-1.5b")
    ap.add_argument("--base-url", default=None)
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--limit", type=int, default=None, help="first N tasks only")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--note", default="", help="a paragraph added under the table")
    ap.add_argument("--report-only", action="store_true", help="ask nothing; tabulate the run")
    ap.add_argument("--tasks", type=Path, default=TASKS, help="task set (JSON)")
    ap.add_argument("--label", default="", help="results file suffix (after the task set)")
    ap.add_argument(
        "--no-decision",
        action="store_true",
        help="no tool-or-text decision before the call (the earlier behaviour)",
    )
    args = ap.parse_args()
    spec = json.loads(args.tasks.read_text())
    base = args.base_url or f"http://127.0.0.1:{PORTS[args.model]}/v1"
    ep = ModelEndpoint(name=f"local/{args.model}", model=f"openai/{args.model}", api_base=base,
                       kind="local", timeout_s=900)  # fmt: skip
    args.run_dir.mkdir(parents=True, exist_ok=True)
    path = args.run_dir / f"{args.model}.jsonl"
    done = {}
    if path.is_file():
        done = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    tasks = spec["tasks"][: args.limit]
    # Interleave the kinds so a partial run covers each of them.
    order = sorted(range(len(tasks)), key=lambda i: (int(tasks[i]["id"].split("-")[1]), i))
    model = LocalToolsChatModel(OpenAICompatChatModel(), decide=not args.no_decision)
    try:
        with path.open("a", encoding="utf-8") as out:
            for i in order:
                task = tasks[i]
                if task["id"] in done or args.report_only:
                    continue
                row = await run_task(model, ep, spec, task, stream=i % 2 == 0)
                out.write(json.dumps(row) + "\n")
                out.flush()
                done[task["id"]] = row
                print(task["id"], row["valid"], row["seconds"], flush=True)
    finally:
        await model.aclose()
    rows = [done[t["id"]] for t in tasks if t["id"] in done]
    command = "python benchmarks/perf/tool_calls.py " + " ".join(sys.argv[1:])
    how = "; no tool-or-text decision" if args.no_decision else ""
    summary, md = table(args.model, rows, command, args.tasks, how)
    print(md)
    if args.write:
        label = f"_{args.tasks.stem}_{args.label}" if args.label else ""
        stem = RESULTS / "tool_calls" / f"tool_calls_{args.model}{label}"
        note = f"\n{args.note}\n" if args.note else ""
        # add_suffix: the model name has a dot in it (qwen2.5-0.5b).
        write_result(stem, summary, md + note, indent=1, add_suffix=True)


if __name__ == "__main__":
    asyncio.run(main())
