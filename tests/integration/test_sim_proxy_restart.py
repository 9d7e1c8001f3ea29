"""A managed proxy started again on a state directory whose previous proxy is still closing.

The stand-in for the old proxy is a real process whose command line names the proxy
module, as ``dmt-proxy serve`` started by a run does; what is tested is the wait on it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from dmt_bench.harness.proxy import wait_for_previous
from dmt_proxy.errors import ConfigError


def _stand_in(seconds: float) -> subprocess.Popen[bytes]:
    """Returns once the child runs its own program (before exec it is still pytest)."""
    code = f"import time; print('up', flush=True); time.sleep({seconds})"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "dmt_proxy.cli.proxy_cli"], stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    proc.stdout.readline()
    proc.stdout.close()
    return proc


def test_start_waits_until_the_previous_proxy_has_exited(tmp_path: Path) -> None:
    old = _stand_in(1.0)
    pid_path = tmp_path / "proxy.pid"
    pid_path.write_text(str(old.pid))
    try:
        started = time.monotonic()
        # Not reaped here: an exited child is a zombie with an empty command line,
        # which counts as gone, as a killed run's proxy (not our child) is once it exits.
        wait_for_previous(pid_path, timeout_s=30)
        assert old.poll() is not None
        assert time.monotonic() - started >= 0.5
    finally:
        old.kill()
        old.wait()


def test_a_proxy_that_does_not_exit_is_named_in_the_error(tmp_path: Path) -> None:
    old = _stand_in(30.0)
    pid_path = tmp_path / "proxy.pid"
    pid_path.write_text(str(old.pid))
    try:
        with pytest.raises(ConfigError, match=rf"pid {old.pid}.*kill {old.pid}"):
            wait_for_previous(pid_path, timeout_s=0.5)
    finally:
        old.kill()
        old.wait()


def test_stale_or_foreign_pid_files_do_not_wait(tmp_path: Path) -> None:
    pid_path = tmp_path / "proxy.pid"
    wait_for_previous(pid_path, timeout_s=0)  # none yet
    pid_path.write_text("not a pid")
    wait_for_previous(pid_path, timeout_s=0)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pid_path.write_text(str(other.pid))  # a reused pid, not a proxy
        wait_for_previous(pid_path, timeout_s=0)
    finally:
        other.kill()
        other.wait()
    pid_path.write_text(str(other.pid))  # exited
    wait_for_previous(pid_path, timeout_s=0)
