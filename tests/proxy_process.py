"""Real processes for integration, reliability and e2e tests, and how to talk to them.

``ProxyProcess`` (``dmt-proxy serve``), ``WorkerProcess`` (``dmt-proxy worker``) and
``FakeUpstream`` (the shipped fake upstream, ``python -m dmt_proxy.testing.upstream_server``,
or the scripted tool-loop upstream), each on a free port; a policy pointing the proxy at
fake upstreams, the environment of a proxy under test, and the admin calls the tests
poll. The fakes are not models: they answer instantly, or fail on demand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from dmt_proxy.net import free_port
from tests.timing import budget

ADMIN_KEY = "reliability-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}

CLEAN_VERDICT = json.dumps(
    {"rationale": "A neutral request; no social group is generalized about.",
     "bias_detected": False, "bias_type": None, "target_group": "", "tendency": "", "score": 0.0}
)  # fmt: skip
"""A schema-valid 'no bias' verdict: the fake upstream answers it when it stands in for
the auditor, so audits complete (status ``clean``) without a model."""


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
        """Start it and wait until ``/healthz`` answers (``timeout_s``: a hang guard, scaled
        by ``DMT_TEST_TIME_FACTOR``; a cold start imports the whole proxy)."""
        timeout_s = budget(timeout_s)
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


@dataclass
class FakeUpstream:
    """One fake upstream server process on a free port (``module`` names which fake)."""

    args: tuple[str, ...] = ()
    port: int = 0
    module: str = "dmt_proxy.testing.upstream_server"
    proc: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, timeout_s: float = 30.0) -> FakeUpstream:
        timeout_s = budget(timeout_s)  # a start-up wait: a hang guard that scales with the machine
        self.port = self.port or free_port()
        # Started by module name, so tests follow the fake wherever it is shipped.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "--port", str(self.port), *self.args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fake upstream {self.args} exited with {self.proc.returncode}")
            try:
                httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=1).raise_for_status()
                return self
            except httpx.HTTPError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"fake upstream {self.args} not healthy in {timeout_s}s")

    def requests(self) -> int:
        """Chat requests this server has received (its retry counter)."""
        return int(httpx.get(f"http://127.0.0.1:{self.port}/health", timeout=5).json()["requests"])

    def kill(self) -> None:
        """SIGKILL: for a fake holding a request open that a graceful stop would wait out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def write_policy(
    path: Path,
    *,
    models: Mapping[str, FakeUpstream],
    default_model: str,
    mode: str = "dmt",
    backend: str = "memory",
    audit: Mapping[str, Any] | None = None,
) -> Path:
    """A policy whose aliases are ``openai/<alias>`` at the given fake upstreams."""
    policy = {
        "version": 1,
        "name": "reliability",
        "mode": mode,
        "default_model": default_model,
        "models": {
            alias: {"model": f"openai/{alias}", "api_base": fake.api_base}
            for alias, fake in models.items()
        },
        "memory": {"backend": backend, "top_k": 3},
        # first_stage off unless a test asks for it: the fake auditor sees every memory.
        "audit": {"tau": 0.5, "auditor_model": default_model, "timeout_s": 10,
                  "max_attempts": 3, "first_stage": "off", **(audit or {})},
    }  # fmt: skip
    path.write_text(yaml.safe_dump(policy, sort_keys=False), encoding="utf-8")
    return path


def proxy_env(**extra: str) -> dict[str, str]:
    """Environment for a proxy under test: admin key, no provider routes, quiet logs."""
    return {
        "DMT_ADMIN_KEY": ADMIN_KEY,
        # A fuzzed model name must never reach a hosted provider (no network but loopback),
        "DMT_ALLOW_PROVIDER_MODELS": "false",
        # nor an embedded llama-server: local/* aliases point at a closed port.
        "DMT_MODELS_PORT_BASE": str(free_port()),
        "DMT_LOG_LEVEL": "warning",
        **extra,
    }


def admin_memories(base_url: str, user: str) -> list[dict[str, Any]]:
    """The memories of ``user``, read through the admin API."""
    resp = httpx.get(f"{base_url}/memories", params={"user": user}, headers=ADMIN, timeout=30)
    resp.raise_for_status()
    return list(resp.json()["data"])


def wait_outbox_empty(base_url: str, timeout_s: float) -> float:
    """Poll the admin API until every acknowledged write is stored and audited; seconds taken.

    ``timeout_s`` is a hang guard (scaled by ``DMT_TEST_TIME_FACTOR``). A proxy busy with
    the audits this waits for may answer one poll slowly: a poll may use what is left of
    the wait (at least a second), not a fixed few seconds of its own.
    """
    timeout_s = budget(timeout_s)
    started = time.monotonic()
    depth = -1
    while (left := timeout_s - (time.monotonic() - started)) > 0:
        resp = httpx.get(f"{base_url}/admin/outbox", headers=ADMIN, timeout=max(left, 1.0))
        depth = resp.json()["depth"]
        if depth == 0:
            return time.monotonic() - started
        time.sleep(0.25)
    raise AssertionError(f"outbox still holds {depth} row(s) after {timeout_s}s")
