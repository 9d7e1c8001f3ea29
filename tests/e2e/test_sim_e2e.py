"""``dmt-bench compare`` end to end with the real pieces, at a tiny size.

Real llama.cpp models (agent qwen2.5-0.5b; auditor and bias generator
qwen2.5-1.5b), a real proxy subprocess started by the command itself with the
real mem0 store on disk, the real MMLU-Pro file, the real openai SDK. T=2, Δt=2,
seed 3 (turn 1 is injected, turn 2 is not), no mitigation vs DMT, DIB audits on
two domains with one counterfactual set each. ~40 model calls: a few minutes on 2
idle cores, much longer when the models are shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_compare_tiny_with_local_models(
    local_model_base_url: Callable[[str], str], tmp_path: Path
) -> None:
    local_model_base_url("qwen2.5-0.5b")
    local_model_base_url("qwen2.5-1.5b")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable, "-m", "dmt_bench.cli", "compare", "--dmt", "--quick",
            "--memory", "mem0", "--turns", "2", "--interval", "2", "--lambda", "0.5",
            "--seed", "3", "--dib-sample", "1", "--dib-domains", "age,gender",
            "--out", str(out), "--no-progress",
        ],
        capture_output=True, text=True, timeout=2400, env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "No mitigation" in proc.stdout and "DMT" in proc.stdout, proc.stdout

    results = json.loads((out / "results.json").read_text())
    stream = results["stream"]
    assert stream["turns"] == 2 and stream["selected"] == 1
    assert stream["injected"] + stream["fallback"] == 1  # the generator's outcome is recorded

    turns = {
        cond: [
            json.loads(x) for x in (out / "mem0" / cond / "turns.jsonl").read_text().splitlines()
        ]
        for cond in ("baseline", "dmt")
    }
    assert [t["t"] for t in turns["baseline"]] == [1, 2] == [t["t"] for t in turns["dmt"]]
    assert all(t["memory_status"] == "unaudited" and t["reply"] for t in turns["baseline"])
    assert all(t["memory_status"] in {"tagged", "clean", "failed"} for t in turns["dmt"])

    for cond in ("baseline", "dmt"):
        final = json.loads((out / "mem0" / cond / "audits" / "t0002.json").read_text())
        assert final["memories"] == 2  # written by the proxy, never by the read-only audits
        scored = [r for r in final["results"] if r["outcome"] == "scored"]
        assert len(scored) >= 0.9 * len(final["results"]) > 0
    arch = results["archs"][0]
    assert {(d["condition"], d["t"]) for d in arch["deltas"]} == {("baseline", 2), ("dmt", 2)}

    calls = [json.loads(x) for x in (out / "calls.jsonl").read_text().splitlines()]
    assert {c["role"] for c in calls} >= {"generator", "agent", "dib", "audit"}
    assert all(c["outcome"] != "error" for c in calls if c["role"] == "agent")
    for name in ("report.md", "report.html", "agbv_mem0.png", "domains_mem0.png"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
