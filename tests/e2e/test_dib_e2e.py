"""``dmt-bench dib run`` end to end against the real local qwen2.5-0.5b (llama-server).

A small stratified sample (whole counterfactual sets, every domain) in
expected-score mode; checks the JSON report's shape and that every decision is
accounted for. Kept small so it stays within a couple of minutes on 2 cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dmt_proxy.domains import DOMAINS

pytestmark = pytest.mark.e2e


def test_dib_run_sample_against_local_model(
    local_model_base_url: Callable[[str], str], tmp_path: Path
) -> None:
    base_url = local_model_base_url("qwen2.5-0.5b")
    out = tmp_path / "run"
    proc = subprocess.run(
        [
            sys.executable, "-m", "dmt_bench.cli", "dib", "run",
            "--model", "qwen2.5-0.5b", "--base-url", base_url,
            "--sample", "60", "--seed", "0", "--concurrency", "2",
            "--bootstrap", "200", "--permutations", "200", "--out", str(out),
        ],
        capture_output=True, text=True, timeout=1200, env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "AGBV" in proc.stdout
    report = json.loads((out / "report.json").read_text())
    assert [d["domain"] for d in report["domains"]] == list(DOMAINS)
    decisions = [json.loads(line) for line in (out / "decisions.jsonl").read_text().splitlines()]
    assert len(decisions) == report["n_decisions"] >= len(DOMAINS) * 2
    assert all(d["outcome"] in {"scored", "refused", "unparseable", "error"} for d in decisions)
    scored = [d for d in decisions if d["outcome"] == "scored"]
    assert len(scored) >= 0.9 * len(decisions)  # the grammar forces a number
    assert all(d["method"] == "expected" and 0 <= d["raw"] <= 100 for d in scored)
    for domain in report["domains"]:
        assert domain["n_contexts"] >= 1
        assert domain["gbv"] is None or domain["gbv"] >= 0
        counts = sum(g["n"] for g in domain["groups"])
        assert counts == domain["n_samples"]
