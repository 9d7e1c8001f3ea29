"""Tags on the dose seed sets' neutral memories under an audit policy (issue 37's target: 0).

The 30 memories of ``dose_seeds_v1`` neutral-1..3 (``dmt_proxy/data/dose/neutral_v1.yaml``:
ordinary first-person chat with no social group) are audited one by one through the
pipeline ``--policy`` describes, with the embedded qwen2.5-1.5b at ``--base-url`` judging
what the first stage sends it, and each decision is recorded. Control: the same run on
the set's stereotyped twins would tag most of them (``auditor_eval`` measures that); here
only the false tags are counted.

Run (a llama-server for qwen2.5-1.5b at the URL, e.g. ``dmt-proxy models start qwen2.5-1.5b``)::

    python benchmarks/perf/judge_dose_neutral.py --policy benchmarks/results/judge_v2/policy_judge_v2.yaml \\
        --base-url http://127.0.0.1:8092/v1 --out benchmarks/results/judge_v2/eval/dose_neutral
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.stats import wilson_interval
from dmt_proxy.audit.auditor import AuditorOptions, LLMAuditor
from dmt_proxy.audit.decision import decide
from dmt_proxy.audit.schema import AuditCandidate
from dmt_proxy.audit.stages import second_judges, staged_auditor
from dmt_proxy.policy import load_policy
from dmt_proxy.resources import data_dir
from dmt_proxy.upstream.base import ModelEndpoint
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel


async def audit_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    policy = load_policy(args.policy)
    endpoint = ModelEndpoint(name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b",
                             api_base=args.base_url, api_key="unused", timeout_s=300)  # fmt: skip
    chat = OpenAICompatChatModel()
    options = AuditorOptions(verdict=policy.audit.verdict, grammar=True, rationale=False)
    llm = LLMAuditor(chat, endpoint, options=options, prompt_version=policy.audit.auditor_prompt,
                     policy=policy.audit)  # fmt: skip
    first_stage, trained = second_judges(policy.audit)
    auditor = staged_auditor(llm, policy.audit, first_stage=first_stage, trained=trained)
    sets = yaml.safe_load((data_dir("dose") / "neutral_v1.yaml").read_text(encoding="utf-8"))
    rows = []
    try:
        for seed_set in sets["sets"]:
            for i, memory in enumerate(seed_set["memories"]):
                verdict = await auditor.audit(AuditCandidate(text=memory["text"]))
                decision = decide(verdict, policy.audit)
                rows.append({"set": seed_set["id"], "index": i, "status": decision.status.value,
                             "domain": decision.tag.bias_type if decision.tag else None,
                             "score": verdict.score, "llm": not verdict.decided_by_first_stage,
                             "first_stage": verdict.first_stage.score if verdict.first_stage else None})  # fmt: skip
                print(f"{seed_set['id']}[{i}]: {rows[-1]['status']}", file=sys.stderr)
    finally:
        await chat.aclose()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--policy", type=Path, required=True)
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--out", type=Path, required=True, help="stem: writes .json and .md")
    args = parser.parse_args()
    rows = asyncio.run(audit_all(args))
    tagged = [r for r in rows if r["status"] != "clean"]
    ci = wilson_interval(len(tagged), len(rows))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()  # fmt: skip
    command = "python benchmarks/perf/judge_dose_neutral.py " + " ".join(sys.argv[1:])
    doc = {"commit": commit, "command": command, "policy": str(args.policy), "rows": rows,
           "tagged": len(tagged), "n": len(rows)}  # fmt: skip
    lines = [
        "# Dose seed sets' neutral memories under the judge v2 pipeline", "",
        f"`{command}` at {commit[:7]}.", "",
        f"Tagged (any non-clean status): **{len(tagged)} of {len(rows)}** "
        f"({len(tagged) / len(rows):.2f} [{ci.low:.2f}, {ci.high:.2f}], Wilson 95 %); target 0. "
        f"Judged by the LLM: {sum(r['llm'] for r in rows)} of {len(rows)}.", "",
        "| set | memory | status | domain | score | judge v2 | LLM |", "|---|---|---|---|---|---|---|",
        *[f"| {r['set']} | {r['index']} | {r['status']} | {r['domain'] or ''} | {r['score']:.2f} | "
          f"{'' if r['first_stage'] is None else format(r['first_stage'], '.2f')} | "
          f"{'yes' if r['llm'] else 'no'} |" for r in rows],
    ]  # fmt: skip
    write_result(args.out, doc, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines[:5]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
