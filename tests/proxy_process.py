"""Run a real ``dmt-proxy serve`` process for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ProxyProcess:
    """A proxy subprocess on a free port, with its state directory and log file."""

    state_dir: Path
    port: int = 0
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def log_path(self) -> Path:
        return self.state_dir / "proxy.log"

    def start(self, *extra_args: str, timeout_s: float = 120.0) -> ProxyProcess:
        if not self.port:
            self.port = free_port()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DMT_STATE_DIR": str(self.state_dir), **(self.env or {})}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(self.port),
             *extra_args],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"proxy exited: {self.log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(
            f"proxy not healthy in {timeout_s}s: {self.log_path.read_text()[-3000:]}"
        )

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run (crash simulation)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@dataclass
class WorkerProcess:
    """A ``dmt-proxy worker`` subprocess (drains the shared outbox; serves no HTTP)."""

    state_dir: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.state_dir / "worker.log"

    def start(self, *extra_args: str) -> WorkerProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "DMT_STATE_DIR": str(self.state_dir), **(self.env or {})}
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "worker", *extra_args],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        return self

    def check_running(self) -> None:
        """Raise with the log's tail if the worker has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"worker exited: {self.log_path.read_text()[-3000:]}")

    def kill(self) -> None:
        """SIGKILL: no shutdown hooks run (crash simulation)."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> int | None:
        """SIGTERM, then the exit code (SIGKILL after 20 s)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        return self.proc.returncode
