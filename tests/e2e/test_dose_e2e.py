"""``dmt-bench dose`` end to end with the real pieces, at a tiny size.

Real llama.cpp models (agent qwen2.5-0.5b, auditor qwen2.5-1.5b), a real proxy
subprocess started by the command with the real mem0 store on disk, the shipped
labelled set, the real openai SDK. One source (age), k ∈ {0, 1}, biased only,
modes off and dmt, DIB on age with two contexts: 3 cells of 6 decisions and one
audited seed write. A few minutes on 2 idle cores, longer when the models are shared.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_dose_tiny_with_local_models(
    local_model_base_url: Callable[[str], str], tmp_path: Path
) -> None:
    local_model_base_url("qwen2.5-0.5b")
    local_model_base_url("qwen2.5-1.5b")
    config = {
        "kind": "dose", "name": "dose-e2e", "sources": ["age"], "doses": [0, 1],
        "kinds": ["biased"], "modes": ["off", "dmt"], "memory": "mem0",
        "models": {"agent": "qwen2.5-0.5b", "auditor": "qwen2.5-1.5b"},
        "dib": {"contexts_per_domain": 2, "domains": ["age"], "bootstrap": 50,
                "permutations": 20},
    }  # fmt: skip
    path = tmp_path / "dose.yaml"
    path.write_text(yaml.safe_dump(config))
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "dmt_bench.cli", "dose", "--config", str(path),
         "--out", str(out)],
        capture_output=True, text=True, timeout=2400, env={**os.environ},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cost estimate" in proc.stderr and "Dose–response" in proc.stdout, proc.stdout

    scope = json.loads((out / "scopes" / "age-biased-k1.json").read_text())
    assert scope["write_mode"] == "dmt" and len(scope["memories"]) == 1
    # The auditor ran on the seed (its verdict is the model's; the state must be final).
    assert scope["memories"][0]["audit_status"] in {"tagged", "clean", "failed"}
    for name in ("empty/plain.json", "age-biased-k1/off.json", "age-biased-k1/dmt.json"):
        cell = json.loads((out / "cells" / name).read_text())
        assert len(cell["results"]) == 6
        scored = [r for r in cell["results"] if r["outcome"] == "scored"]
        assert len(scored) >= 5, name
        assert cell["memories"] == (0 if name.startswith("empty") else 1)
    results = json.loads((out / "results.json").read_text())
    rows = results["readouts"]["expected"]["rows"]
    assert {(r["k"], r["mode"]) for r in rows} == {(1, "off"), (1, "dmt")}
    assert all(r["diagonal"] is not None for r in rows)
    for name in ("report.md", "report.html", "dose_response.png"):
        assert (out / name).stat().st_size > 0
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
