"""Start and stop the processes a performance benchmark measures."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path


def wait_http(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process for {url} exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} not ready after {timeout_s}s")


def start(cmd: list[str], health_url: str, log: Path, env: dict[str, str] | None = None,
          timeout_s: float = 120.0, cwd: str | None = None) -> subprocess.Popen[bytes]:  # fmt: skip
    """Start ``cmd`` with output to ``log`` and wait until ``health_url`` answers (``cwd``:
    where it runs; ``python -m`` puts that directory first on ``sys.path``)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd
        )
    try:
        wait_http(health_url, proc, timeout_s)
    except BaseException:
        stop(proc)
        raise
    return proc


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def python() -> str:
    return sys.executable
