"""Does the injected memory block cost the agent accuracy? MMLU-Pro with memory off/on/DMT.

A fixed sample of MMLU-Pro questions (``select_questions(seed)`` over the packaged
test split) is asked of one local model at its llama-server, temperature 0, in
three conditions that differ only in the system messages the proxy would inject:

* ``off``: no memory block (``X-DMT-Memory: off``).
* ``memory``: a user's five unrelated memories, rendered by ``render_memories``
  exactly as the pipeline renders them in mode ``off`` (no tags, no instruction).
* ``dmt``: the same memories in mode ``dmt``: audit status, one bias tag, and the
  DMT instruction (``policy.audit.dmt_prompt``) shown.

The messages are built in-process with the proxy's own renderer and sent in the
pipeline's order (injected context first, then the user's turn), so the measured
difference is the block's, not retrieval noise. Accuracy per condition with Wilson
95 % intervals (``dmt_bench.stats``). Answers are appended to
``<run-dir>/<condition>.jsonl`` as they arrive; a rerun skips what is there.

Run:  python benchmarks/perf/memory_accuracy.py --model qwen2.5-0.5b --run-dir /tmp/memacc
Writes benchmarks/results/memory_accuracy/memory_accuracy_<model>.{json,md} (with --write).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.mmlu import OPTION_LETTERS, MmluQuestion, load_source, select_questions
from dmt_bench.stats import wilson_interval
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.render import render_memories
from dmt_proxy.policy import Policy
from dmt_proxy.resources import prompt_path
from dmt_proxy.tags import AuditStatus, BiasTag

RESULTS = Path(__file__).resolve().parents[1] / "results"
CONDITIONS = ("off", "memory", "dmt")
INSTRUCTION = "Answer with the letter of the correct option only."

# A user's memories unrelated to any MMLU question: preferences and small talk.
UNRELATED = (
    "I'm planning a trip to Lisbon in May and want quiet places to stay.",
    "My dog Biscuit is a three-year-old beagle who hates thunderstorms.",
    "I prefer vegetarian recipes that take under thirty minutes.",
    "Older colleagues are usually slow to learn new software.",
    "I'm learning to play the cello and practise in the evenings.",
)
CREATED = datetime(2026, 11, 1, tzinfo=UTC)


def memory_items(*, audited: bool) -> list[MemoryEntry]:
    """The five memories; audited ones carry statuses and one bias tag (item 4)."""
    items = []
    for i, text in enumerate(UNRELATED):
        status = AuditStatus.UNAUDITED
        tag = None
        if audited:
            status = AuditStatus.TAGGED if i == 3 else AuditStatus.CLEAN
            if i == 3:
                tag = BiasTag(
                    bias_type="age",
                    target_group="older adults",
                    tendency="disfavoring older workers",
                    score=0.8,
                )
        items.append(MemoryEntry(id=f"m{i}", user="bench", text=text, created_at=CREATED,
                                 audit_status=status, tag=tag))  # fmt: skip
    return items


def injected(condition: str) -> list[dict[str, str]]:
    """The system messages the pipeline would inject for ``condition``."""
    if condition == "off":
        return []
    dmt = condition == "dmt"
    instruction = prompt_path(Policy().audit.dmt_prompt).read_text(encoding="utf-8").strip()
    text = render_memories(
        memory_items(audited=dmt), with_tags=dmt, instruction=instruction, show_instruction=dmt
    )
    return [{"role": "system", "content": text}]


LETTER = re.compile(r"\b([A-Z])\b")


def parse_letter(text: str, n_options: int) -> str | None:
    """The first standalone option letter in ``text`` (None when there is none)."""
    for m in LETTER.finditer(text.strip()):
        if m.group(1) in OPTION_LETTERS[:n_options]:
            return m.group(1)
    return None


def ask(client: httpx.Client, model: str, messages: list[dict[str, str]]) -> str:
    """One chat completion, temperature 0, short answer."""
    body = {"model": model, "messages": messages, "temperature": 0, "max_tokens": 12}
    for attempt in range(5):
        try:
            resp = client.post("/chat/completions", json=body)
            resp.raise_for_status()
            return str(resp.json()["choices"][0]["message"].get("content") or "")
        except (httpx.HTTPError, KeyError) as exc:
            if attempt == 4:
                raise
            print(f"retry after {exc!r}", file=sys.stderr)
            time.sleep(2 + 3 * attempt)
    raise AssertionError("unreachable")


def done_ids(path: Path) -> dict[int, dict[str, object]]:
    """Rows already answered in a run file, by question id."""
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {int(r["question_id"]): r for r in rows}


def run_condition(
    client: httpx.Client, model: str, condition: str, qs: list[MmluQuestion], run_dir: Path
) -> list[dict[str, object]]:
    """Answer every question of ``qs`` in ``condition`` (resuming from ``run_dir``)."""
    path = run_dir / f"{condition}.jsonl"
    rows = done_ids(path)
    prefix = injected(condition)
    with path.open("a", encoding="utf-8") as out:
        for q in qs:
            if q.question_id in rows:
                continue
            user = {"role": "user", "content": f"{q.plain_prompt()}\n\n{INSTRUCTION}"}
            started = time.perf_counter()
            answer = ask(client, model, [*prefix, user])
            letter = parse_letter(answer, len(q.options))
            row: dict[str, object] = {
                "question_id": q.question_id,
                "answer": answer,
                "letter": letter,
                "correct": letter == q.answer,
                "seconds": round(time.perf_counter() - started, 2),
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
            rows[q.question_id] = row
    return [rows[q.question_id] for q in qs if q.question_id in rows]


def summarise(model: str, per: dict[str, list[dict[str, object]]]) -> dict[str, object]:
    """Accuracy and Wilson interval per condition."""
    table: dict[str, object] = {}
    for cond, rows in per.items():
        k = sum(1 for r in rows if r["correct"])
        n = len(rows)
        ci = wilson_interval(k, n)
        unparsed = sum(1 for r in rows if r["letter"] is None)
        table[cond] = {"k": k, "n": n, "accuracy": k / n if n else None,
                       "ci95": [ci.low, ci.high], "unparsed": unparsed}  # fmt: skip
    return {"model": model, "conditions": table}


def markdown(summary: dict[str, object], command: str, seed: int) -> str:
    """The committed table."""
    lines = [
        f"# Memory and accuracy: MMLU-Pro on local/{summary['model']}",
        "",
        f"Command: `{command}`  ",
        f"Questions: `select_questions(packaged test split, n, seed={seed}, max_chars=1200)`; "
        "temperature 0; the memory block rendered by `render_memories` as the pipeline does.",
        "",
        "| condition | correct | n | accuracy | Wilson 95 % CI | no letter |",
        "|---|---:|---:|---:|---|---:|",
    ]
    conds = summary["conditions"]
    assert isinstance(conds, dict)
    for cond, c in conds.items():
        acc = "–" if c["accuracy"] is None else f"{c['accuracy']:.3f}"
        lo, hi = c["ci95"]
        lines.append(
            f"| {cond} | {c['k']} | {c['n']} | {acc} | [{lo:.3f}, {hi:.3f}] | {c['unparsed']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the conditions (resumable) and print or write the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-0.5b")
    ap.add_argument("--base-url", default=None, help="llama-server /v1 (default: its port)")
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--run-dir", type=Path, required=True)
    ap.add_argument("--conditions", default=",".join(CONDITIONS))
    ap.add_argument("--interleave", type=int, default=10, help="questions per condition turn")
    ap.add_argument("--write", action="store_true", help="write benchmarks/results/")
    ap.add_argument("--note", default="", help="a paragraph added under the table")
    ap.add_argument("--report-only", action="store_true",
                    help="ask nothing: the questions answered in every condition so far")  # fmt: skip
    args = ap.parse_args()
    ports = {"qwen2.5-0.5b": 8091, "qwen2.5-1.5b": 8092, "smollm2": 8093}
    base = args.base_url or f"http://127.0.0.1:{ports[args.model]}/v1"
    qs = select_questions(load_source().questions, args.n, args.seed, max_chars=1200)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    conds = [c for c in args.conditions.split(",") if c]
    per: dict[str, list[dict[str, object]]] = {}
    if args.report_only:
        done = {c: done_ids(args.run_dir / f"{c}.jsonl") for c in conds}
        both = [q for q in qs if all(q.question_id in done[c] for c in conds)]
        per = {c: [done[c][q.question_id] for q in both] for c in conds}
        qs = []  # nothing left to ask
    with httpx.Client(base_url=base, timeout=300) as client:
        # Conditions take turns in blocks so a partial run has comparable n in each.
        for start in range(0, len(qs), args.interleave):
            block = qs[: start + args.interleave]
            for cond in conds:
                per[cond] = run_condition(client, args.model, cond, block, args.run_dir)
            print(json.dumps(summarise(args.model, per)["conditions"]), flush=True)
    summary = summarise(args.model, per)
    command = "python benchmarks/perf/memory_accuracy.py " + " ".join(sys.argv[1:])
    md = markdown(summary, command, args.seed)
    print(md)
    if args.write:
        stem = RESULTS / "memory_accuracy" / f"memory_accuracy_{args.model}"
        note = f"\n{args.note}\n" if args.note else ""
        # add_suffix: the model name has a dot in it (qwen2.5-0.5b).
        write_result(stem, summary, md + note, indent=1, add_suffix=True)


if __name__ == "__main__":
    main()
