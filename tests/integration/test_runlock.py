"""The run-directory lock: a second process waits for the first, then runs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from dmt_bench.harness import runlock
from dmt_bench.harness.rundir import open_run_dir
from dmt_bench.sim.config import SIM_VERSION, load_config
from dmt_proxy.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"

HOLDER = """
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holder(run: Path, seconds: float) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run / runlock.LOCK_NAME), str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    proc.stdout.close()
    return proc


def test_waits_for_another_process_then_holds_it(tmp_path: Path) -> None:
    other = _holder(tmp_path, 1.0)
    try:
        started = time.monotonic()
        runlock.acquire(tmp_path, wait_s=30)
        assert time.monotonic() - started >= 0.5 and other.wait(timeout=5) == 0
        runlock.acquire(tmp_path)  # the same process again: already held
    finally:
        runlock.release(tmp_path)
        other.kill()
        other.wait()
    runlock.release(tmp_path)  # not held: nothing to do


def test_names_the_directory_when_the_other_process_keeps_it(tmp_path: Path) -> None:
    other = _holder(tmp_path, 30.0)
    try:
        with pytest.raises(ConfigError, match="another dmt-bench process is running"):
            runlock.acquire(tmp_path, wait_s=0.3)
    finally:
        other.kill()
        other.wait()
    runlock.acquire(tmp_path, wait_s=0)  # a killed holder's lock is gone with it
    runlock.release(tmp_path)


STOPPING = """
import fcntl, json, os, sys, time
fd = os.open(sys.argv[1] + "/.run.lock", os.O_RDWR | os.O_CREAT)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(1.0)  # stopping its proxy
path = sys.argv[1] + "/run.json"
manifest = json.load(open(path))
manifest.update(status="stopped", elapsed_s=123.0)
open(path, "w").write(json.dumps(manifest))
"""


def test_a_resume_reads_the_manifest_a_stopping_run_writes_last(tmp_path: Path) -> None:
    config = load_config(CONFIGS / "compare_local_T20.yaml")
    out = tmp_path / "run"
    open_run_dir(out, config, resume=False, version=SIM_VERSION)
    runlock.release(out)
    stopping = subprocess.Popen([sys.executable, "-c", STOPPING, str(out)], stdout=subprocess.PIPE)
    assert stopping.stdout is not None and stopping.stdout.readline() == b"held\n"
    stopping.stdout.close()
    try:
        manifest = open_run_dir(out, config, resume=True, version=SIM_VERSION)
    finally:
        runlock.release(out)
        stopping.wait(timeout=10)
    assert manifest.elapsed_s == 123.0 and manifest.status == "running"
