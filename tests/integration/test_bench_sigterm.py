"""``kill`` (SIGTERM) of a running ``dmt-bench run``: the run records that it stopped.

A real ``dmt-bench`` process runs a compare whose models are the shipped fake upstream
(``dmt_proxy.testing.upstream_server``, not a model) answering after a minute, so the
run is waiting on its bias generator when it is killed. What is tested is the process's
handling of the signal: exit status 143, ``run.json`` saying ``stopped`` with the time it
ran (which a resumed run adds to), and the resume command on stderr.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.proxy_process import FakeUpstream
from tests.timing import budget

pytestmark = pytest.mark.slow


@pytest.fixture
def slow_upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream(("--delay-s", "60")).start()
    try:
        yield fake
    finally:
        fake.kill()  # it would wait out the minute-long request the killed run left open


def test_sigterm_marks_the_run_stopped_with_its_time(
    tmp_path: Path, slow_upstream: FakeUpstream
) -> None:
    model = {"model": "openai/fake-model", "api_base": slow_upstream.api_base,
             "api_key_env": "FAKE_KEY"}  # fmt: skip
    config = {
        "version": 2, "kind": "compare", "name": "sigterm", "seed": 0, "turns": 2,
        "interval": 1, "conditions": ["baseline"], "memory": ["mem0"],
        "models": {"agent": model, "auditor": model, "generator": model},
        "injection": {"rate": 1.0}, "dib": {"contexts_per_domain": 2},
    }  # fmt: skip
    path = tmp_path / "c.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmt_bench.cli", "run", "--config", str(path),
         "--out", str(out)],
        env={**os.environ, "FAKE_KEY": "not-a-key"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + budget(120)
    while not (out / "run.json").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, "the run did not start"
        time.sleep(0.2)
    time.sleep(3)  # a few seconds into the run,
    while slow_upstream.requests() == 0:  # and into its first (minute-long) model call
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run made no model call"
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    manifest = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert manifest["status"] == "stopped"
    assert manifest["elapsed_s"] > 1  # the seconds it ran, not 0
    assert f"dmt-bench run --out {out} --resume" in err
    assert "Traceback" not in err
