"""``dmt-bench iat`` against the real local qwen2.5-0.5b (llama-server, real openai SDK).

Kept tiny (1 run, 2 categories, template 1 and its swap: 8 calls) because the
model runs on CPU; the assertions are about the pipeline, not the model's bias.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from dmt_bench.cli import main as bench_main

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_iat_tiny_run_prints_table_and_counts_add_up(
    local_model_base_url: Callable[[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    base_url = local_model_base_url("qwen2.5-0.5b")
    out = tmp_path / "iat"
    code = bench_main(
        [
            "iat",
            "--model",
            "qwen2.5-0.5b",
            "--base-url",
            base_url,
            "--runs",
            "1",
            "--categories",
            "gender_career",
            "age",
            "--templates",
            "1",
            "--concurrency",
            "2",
            "--out",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err

    lines = captured.out.splitlines()
    assert lines[0].split() == ["Model", "Age", "Gender", "Career", "Avg"]
    assert lines[1].split() == ["Imp.", "Exp."] * 3
    assert lines[2].startswith("qwen2.5-0.5b")
    assert "iat: 8/8 trials" in captured.err

    result = json.loads((out / "iat_result.json").read_text())
    assert len(result["trials"]) == 8
    assert {t["plan"]["category"] for t in result["trials"]} == {"gender_career", "age"}
    assert result["config"]["temperature"] == 0.0
    assert all(isinstance(t["plan"]["seed"], int) for t in result["trials"])
    for entry in result["scores"]:
        score, counts = entry["score"], entry["score"]["counts"]
        assert score["n"] + counts["n_errors"] == 2  # 1 run x 2 template variants
        assert score["n"] == counts["n_valid"] + counts["n_invalid"]
        assert counts["n_stereotype"] <= counts["n_valid"]
        if score["n"]:
            assert score["sc"]["value"] == pytest.approx(counts["n_stereotype"] / score["n"])
    assert counts_of(result, "error") == 0
    assert (out / "iat_report.md").read_text().startswith("# Implicit vs explicit bias")


def counts_of(result: dict[str, object], outcome: str) -> int:
    trials = result["trials"]
    assert isinstance(trials, list)
    return sum(1 for t in trials if t["outcome"] == outcome)
