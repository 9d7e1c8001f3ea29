"""Speed of the embedded local models as served by llama-server on this machine.

For each model: prompt processing and generation tokens/s (from llama-server's own
``timings``), and the wall time of a short decision prompt (DIB-style, 0-100
integer constrained by a GBNF grammar, ``max_tokens`` 4) with a cold and a warm
prompt cache. Models must be running (``dmt-proxy models start``).

Run:  python benchmarks/perf/local_models.py [--repeats 5]
Writes benchmarks/results/perf/local_models/local_models.{json,md}.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_proxy.settings import Settings
from dmt_proxy.upstream.local_models import LOCAL_MODELS
from dmt_proxy.upstream.models import local_api_base

RESULTS = Path(__file__).resolve().parents[1] / "results"
GRAMMAR = 'root ::= "100" | [1-9] [0-9] | [0-9]'
LONG_PROMPT = " ".join(
    f"Item {i}: the quarterly report lists revenue, costs and headcount for region {i % 7}."
    for i in range(40)
)
DECISION = (
    "You are a compensation engine. Candidate: 6 years of backend experience, led two "
    "migrations, strong references. Role: senior software engineer in a mid-size firm. "
    "Estimate the salary percentile (0-100) this candidate should be offered. Answer with "
    "the number only."
)


def post(base: str, body: dict[str, Any]) -> tuple[dict[str, Any], float]:
    req = urllib.request.Request(
        base + "/chat/completions", data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )  # fmt: skip
    t0 = time.perf_counter()
    with urllib.request.urlopen(req, timeout=600) as resp:
        data = json.load(resp)
    return data, time.perf_counter() - t0


def measure(name: str, base: str, repeats: int) -> dict[str, Any]:
    prompt_tps, gen_tps, cold, warm = [], [], [], []
    for i in range(repeats):
        # A unique prefix defeats the prompt cache, so prompt speed is measured for real.
        data, _ = post(base, {"model": name, "max_tokens": 64, "temperature": 0,
                              "messages": [{"role": "user", "content": f"[{i}-{time.time()}] "
                                            + LONG_PROMPT + " Summarize."}]})  # fmt: skip
        t = data.get("timings", {})
        prompt_tps.append(float(t.get("prompt_per_second", "nan")))
        gen_tps.append(float(t.get("predicted_per_second", "nan")))
        body = {"model": name, "max_tokens": 4, "temperature": 0, "grammar": GRAMMAR,
                "messages": [{"role": "user", "content": f"({i}-{time.time()}) {DECISION}"}]}  # fmt: skip
        _, seconds = post(base, body)
        cold.append(seconds)
        _, seconds = post(base, body)  # identical prompt: served from the prompt cache
        warm.append(seconds)
    med = statistics.median
    return {
        "model": name,
        "prompt_tokens_per_s": med(prompt_tps),
        "generation_tokens_per_s": med(gen_tps),
        "decision_cold_s": med(cold),
        "decision_warm_s": med(warm),
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "perf" / "local_models" / "local_models"
    )
    args = parser.parse_args()
    settings = Settings.from_env()
    rows = [measure(n, local_api_base(settings, n), args.repeats) for n in LOCAL_MODELS]
    data = {"benchmark": "local_models", "version": 1,
            "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "threads": settings.model_threads, "parallel_slots": settings.model_parallel,
            "results": rows}  # fmt: skip
    lines = [
        "# Local model speed (benchmark `local_models` v1)", "",
        f"Measured {data['when']}, llama-server with {data['threads']} threads and "
        f"{data['parallel_slots']} slots, one request at a time, medians of {args.repeats}. "
        "Prompt ~900 tokens with a unique prefix (no cache); generation up to 64 tokens. "
        "Decision = a short salary-percentile prompt with a 0-100 integer grammar, max 4 "
        "tokens: cold (new prompt) and warm (same prompt again, served from the prompt cache).",
        "", "Rerun: `dmt-proxy models start && python benchmarks/perf/local_models.py`", "",
        "| model | prompt tok/s | generation tok/s | decision cold s | decision warm s |",
        "|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        lines.append(f"| {r['model']} | {r['prompt_tokens_per_s']:.0f} | "
                     f"{r['generation_tokens_per_s']:.1f} | {r['decision_cold_s']:.2f} | "
                     f"{r['decision_warm_s']:.2f} |")  # fmt: skip
    write_result(args.out, data, "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
