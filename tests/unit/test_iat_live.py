"""``dmt-bench iat-drift --run``: the IAT probe over a compare run's memory, with shipped fakes.

Here the command's error paths and the agent model it picks; the probe over a real
compare run through ``FakeProxy`` (loopback HTTP) is
``tests/integration/test_iat_live_runs.py``. Real models: tests/e2e.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dmt_bench.cli import main as bench_main
from dmt_bench.harness.rundir import Manifest
from dmt_bench.iat.live_plan import (
    agent_model,
)
from dmt_bench.sim.config import SIM_VERSION, SimConfig, parse_config
from dmt_proxy.settings import Settings

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""


def test_agent_model_defaults_to_the_runs_agent() -> None:
    config = SimConfig()
    assert agent_model(config, None, external=False) == (config, "local/qwen2.5-0.5b")
    same, name = agent_model(config, "qwen2.5-1.5b", external=False)
    assert name == "local/qwen2.5-1.5b" and same.models.agent.model == "local/qwen2.5-1.5b"
    hosted, name = agent_model(config, "openai/gpt-x", external=False)
    assert name == "sim-agent" and hosted.models.agent.model == "openai/gpt-x"
    assert agent_model(config, "openai/gpt-x", external=True) == (config, "openai/gpt-x")


def fabricated_run(
    tmp: Path, *, kind: str = "compare", status: str = "complete", **raw: Any
) -> Path:
    """A run directory with only a manifest (for the error paths)."""
    config = parse_config({"memory": ["memory"], "conditions": ["baseline", "dmt"], **raw})
    out = tmp / f"run-{kind}-{status}"
    out.mkdir()
    manifest = Manifest(
        sim_version=SIM_VERSION, kind=kind, name=config.name, digest=config.digest(), run_id="feed", created="now",
        status=status, config=config.model_dump(mode="json"),
    )  # fmt: skip
    (out / "run.json").write_text(manifest.model_dump_json())
    (out / "config.yaml").write_text(yaml.safe_dump(manifest.config))
    return out


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda t: t / "nope", [], "not a directory"),
        (lambda t: t, [], "no run.json"),
        (lambda t: fabricated_run(t, kind="heatmap"), [], "holds a heatmap run"),
        (lambda t: fabricated_run(t, status="stopped"), [], "the compare run is stopped"),
        (lambda t: fabricated_run(t), ["--arch", "mem0"], "the run used memory"),
        (lambda t: fabricated_run(t), ["--conditions", "ssp"], "(not ssp)"),
        (lambda t: fabricated_run(t), [], "memory store is missing"),
        (lambda t: fabricated_run(t), ["r.json"], "not both"),
        (lambda t: fabricated_run(t), ["--baseline", "dmt@t1"], "not one of baseline@t0"),
        (lambda t: fabricated_run(t), ["--runs", "0"], "at least 1"),
    ],
)
def test_config_errors(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Any,
    extra: list[str],
    message: str,
) -> None:
    run = make(tmp_path)
    assert bench_main(["iat-drift", "--run", str(run), "--out", str(tmp_path / "o"), *extra]) == 2
    assert message in capsys.readouterr().err


def test_live_options_need_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_main(["iat-drift", "a.json", "b.json", "--runs", "2", "--arch", "x"]) == 2
    assert "--arch, --runs only apply with --run" in capsys.readouterr().err
    assert bench_main(["iat-drift", "a.json"]) == 2
    assert "at least two result files" in capsys.readouterr().err
