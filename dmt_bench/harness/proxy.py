"""The proxy a benchmark runs through: started for the run, or a running one.

A managed proxy is a real ``dmt-proxy serve`` subprocess with its own policy file
and state directory inside the run directory (so a resumed run finds its memory
again) and a random admin key. On Linux it is asked to receive SIGTERM when the
run dies (``PR_SET_PDEATHSIG``), so a killed run does not leave it holding its
port and store locks. The proxy takes a few seconds to close its store after that
signal, so a run resumed at once would find the store still locked: the proxy's pid
is kept in ``proxy.pid`` and a new start waits for the old process to exit first.
``ProxyClient`` talks to the admin API: outbox depth (to wait until every write of a
turn is stored and audited), memory listings and seeding.

``run_policy`` writes the policy of a run's two models (agent, auditor): a local
model is asked for by name, any other through an alias (``AGENT_ALIAS``,
``AUDITOR_ALIAS``; the names are recorded in committed runs' policies).
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import yaml

from dmt_bench.harness.config import AuditConfig, ModelSpec
from dmt_proxy.errors import ConfigError, UpstreamError
from dmt_proxy.net import free_port

AGENT_ALIAS = "sim-agent"
AUDITOR_ALIAS = "sim-auditor"


class ProxyUnavailable(UpstreamError):
    """The proxy stopped answering (after retries)."""


def request_model(spec: ModelSpec, alias: str) -> str:
    """The model name the proxy is asked for: a local alias as is, anything else via an alias."""
    return spec.model if spec.is_local else alias


class RunModels(Protocol):
    """The two models of a run (the simulation's and the dose run's configs both have them)."""

    @property
    def agent(self) -> ModelSpec: ...
    @property
    def auditor(self) -> ModelSpec: ...


def run_policy(
    name: str,
    models: RunModels,
    audit: AuditConfig,
    memory: dict[str, Any],
) -> dict[str, Any]:
    """The proxy policy of a benchmark run: aliases for non-local models, the auditor, memory."""
    aliases: dict[str, Any] = {}
    for spec, alias in ((models.agent, AGENT_ALIAS), (models.auditor, AUDITOR_ALIAS)):
        if not spec.is_local:
            entry: dict[str, Any] = {"model": spec.model}
            if spec.api_base:
                entry["api_base"] = spec.api_base
            if spec.api_key_env:
                entry["api_key_env"] = spec.api_key_env
            aliases[alias] = entry
    policy: dict[str, Any] = {
        "version": 1,
        "name": name,
        "mode": "off",
        "default_model": request_model(models.agent, AGENT_ALIAS),
        # The blocks an agent sees stay those of the committed runs: no provenance `source`
        # (a seeded memory would read "added by an operator"), unless a run asks for it.
        "memory": {"show_source": False, **memory},
        "audit": {
            "tau": audit.tau,
            "auditor_model": request_model(models.auditor, AUDITOR_ALIAS),
            "auditor_prompt": audit.prompt,
            "timeout_s": audit.timeout_s,
            "first_stage": audit.first_stage,
        },
    }
    if aliases:
        policy["models"] = aliases
    return policy


def validate_backend_options(backend: str, options: dict[str, Any]) -> None:
    """ConfigError naming the problem when ``backend`` would reject ``options``."""
    if not options:
        return
    from pydantic import ValidationError

    from dmt_proxy.memory.registry import backend_class

    try:
        backend_class(backend).Options.model_validate(options)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"backend_options.{backend} are invalid: {problems}") from None


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


@dataclass
class ProxyClient:
    """The proxy's base URL (``.../v1``) and admin key, with the admin calls the loop needs."""

    base_url: str
    admin_key: str
    timeout_s: float = 60.0

    def _headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.admin_key}"}

    async def _get(self, path: str, **params: str) -> Any:
        async with httpx.AsyncClient(timeout=self.timeout_s) as client:
            resp = await client.get(self.base_url + path, params=params, headers=self._headers())
        if resp.status_code in (401, 403):
            raise ConfigError(
                f"the proxy at {self.base_url} refused the admin key ({resp.status_code}): "
                "start it with DMT_ADMIN_KEY and pass the same key (execution.admin_key_env)"
            )
        resp.raise_for_status()
        return resp.json()

    async def outbox_depth(self) -> int:
        """Memory writes not yet stored and audited."""
        return int((await self._get("/admin/outbox"))["depth"])

    async def wait_drained(self, timeout_s: float, poll_s: float = 0.25) -> float:
        """Wait until the outbox is empty; seconds waited. Raises after ``timeout_s``."""
        started = time.monotonic()
        while True:
            try:
                depth = await self.outbox_depth()
            except httpx.HTTPError as exc:
                raise ProxyUnavailable(
                    f"proxy admin API failed: {exc}", upstream=self.base_url
                ) from exc
            if depth == 0:
                return time.monotonic() - started
            if time.monotonic() - started > timeout_s:
                raise ProxyUnavailable(
                    f"the proxy's outbox still holds {depth} write(s) after {timeout_s:.0f}s "
                    "(is the auditor model up?)",
                    upstream=self.base_url,
                )
            await asyncio.sleep(poll_s)

    async def add_memory(self, user: str, query: str, *, answer: str = "", mode: str) -> str:
        """Queue one memory for ``user`` (``POST /v1/memories``); its id."""
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                resp = await client.post(
                    self.base_url + "/memories",
                    json={"user": user, "query": query, "answer": answer, "mode": mode},
                    headers=self._headers(),
                )
        except httpx.HTTPError as exc:
            raise ProxyUnavailable(
                f"proxy admin API failed: {exc}", upstream=self.base_url
            ) from exc
        if resp.status_code in (401, 403):
            raise ConfigError(f"the proxy at {self.base_url} refused the admin key")
        resp.raise_for_status()
        return str(resp.json()["id"])

    async def memories(self, user: str) -> list[dict[str, Any]]:
        """Every memory of ``user`` (pending writes included)."""
        try:
            data = await self._get("/memories", user=user)
        except httpx.HTTPError as exc:
            raise ProxyUnavailable(
                f"proxy admin API failed: {exc}", upstream=self.base_url
            ) from exc
        return list(data["data"])

    def healthy(self) -> bool:
        root = self.base_url.removesuffix("/v1")
        try:
            return httpx.get(root + "/healthz", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False


@dataclass(frozen=True)
class ProxySpec:
    """What a managed proxy runs with: its policy (``policy.yaml``) and its time limits."""

    policy: dict[str, Any]
    request_timeout_s: float
    start_timeout_s: float
    nonce_key: str | None = None
    """The memory-block nonce key (hex, ``DMT_MEMORY_NONCE_KEY``), derived from the run's
    config (``sitting.nonce_key``) so the same memories render as the same bytes in every
    sitting and rerun; ``None``: the proxy's random per-process key."""


class ManagedProxy:
    """A ``dmt-proxy serve`` subprocess for one memory architecture."""

    def __init__(self, spec: ProxySpec, backend: str, home: Path) -> None:
        """``spec``: the policy and time limits (``sim.proxy.sim_proxy_spec`` for a simulation)."""
        self.spec = spec
        self.backend = backend
        self.home = home
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: ProxyClient | None = None

    @property
    def log_path(self) -> Path:
        return self.home / "proxy.log"

    @property
    def pid_path(self) -> Path:
        return self.home / "proxy.pid"

    def start(self) -> ProxyClient:
        """Check the backend options, write the policy, start the proxy, wait until healthy."""
        validate_backend_options(self.backend, self.spec.policy["memory"].get("options", {}))
        state = self.home / "state"
        state.mkdir(parents=True, exist_ok=True)
        wait_for_previous(self.pid_path, self.spec.start_timeout_s)
        policy_path = self.home / "policy.yaml"
        policy_path.write_text(yaml.safe_dump(self.spec.policy, sort_keys=False), "utf-8")
        port = free_port()
        key = secrets.token_hex(16)
        env = {
            **os.environ,
            "DMT_STATE_DIR": str(state),
            "DMT_ADMIN_KEY": key,
            "DMT_UPSTREAM_TIMEOUT_S": str(self.spec.request_timeout_s),
        }
        if self.spec.nonce_key is not None:
            env["DMT_MEMORY_NONCE_KEY"] = self.spec.nonce_key
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dmt_proxy.cli.proxy_cli",
                    "serve",
                    "--port",
                    str(port),
                    "--policy",
                    str(policy_path),
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
            )
        self.pid_path.write_text(str(self.proc.pid), "utf-8")
        client = ProxyClient(f"http://127.0.0.1:{port}/v1", key)
        try:
            self._wait_healthy(client)
        except BaseException:  # an interrupt while it starts must not leave it running
            self.stop()
            raise
        self.client = client
        return client

    def _wait_healthy(self, client: ProxyClient) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.spec.start_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text("utf-8", errors="replace")[-2000:]
                raise ConfigError(f"the {self.backend} proxy exited at start-up:\n{tail}")
            if client.healthy():
                return
            time.sleep(0.3)
        raise ConfigError(
            f"the {self.backend} proxy was not healthy after "
            f"{self.spec.start_timeout_s:.0f}s; see {self.log_path}"
        )

    def stop(self) -> None:
        """SIGTERM (the proxy closes its stores), then SIGKILL after 30 s."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None
        self.pid_path.unlink(missing_ok=True)


_PROXY_MODULE = "dmt_proxy.cli.proxy_cli"


def _is_proxy(pid: int) -> bool:
    """Whether ``pid`` is a live ``dmt-proxy serve`` (a reused pid of another program is not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # alive, someone else's: treat as the proxy rather than race its store
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():  # no procfs (macOS): a live pid is all we can know
        return True
    try:
        return _PROXY_MODULE in cmdline.read_text("utf-8", errors="replace")
    except OSError:
        return False


def wait_for_previous(pid_path: Path, timeout_s: float, poll_s: float = 0.2) -> None:
    """Wait until the proxy recorded in ``pid_path`` (a stopped run's) has exited.

    A run killed a moment ago leaves its proxy closing the memory store, which a new
    proxy on the same state directory cannot open until then. ConfigError, naming the
    pid, when it is still running after ``timeout_s``.
    """
    try:
        pid = int(pid_path.read_text("utf-8").strip())
    except (OSError, ValueError):
        return
    if not _is_proxy(pid):
        return
    print(f"waiting for the previous proxy (pid {pid}) to close its store ...", file=sys.stderr)
    deadline = time.monotonic() + timeout_s
    while _is_proxy(pid):
        if time.monotonic() > deadline:
            raise ConfigError(
                f"the previous proxy (pid {pid}) still runs on {pid_path.parent} after "
                f"{timeout_s:.0f}s; stop it (kill {pid}) and resume"
            )
        time.sleep(poll_s)


def connect_proxy(url: str, admin_key_env: str, needs: str) -> ProxyClient:
    """A client for a running proxy at ``url``, with the admin key from ``$admin_key_env``.

    ``needs`` says which admin routes the caller uses, for the error when the key is missing.
    """
    key = os.environ.get(admin_key_env, "")
    if not key:
        raise ConfigError(f"a running proxy needs its admin key in ${admin_key_env} ({needs})")
    client = ProxyClient(url.rstrip("/"), key)
    if not client.healthy():
        raise ConfigError(f"no healthy proxy at {url} (GET /healthz failed)")
    return client
