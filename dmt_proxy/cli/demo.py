"""``dmt-proxy demo``: what the proxy does, shown with the real local models.

One user says a neutral and a biased remark through the proxy; the auditor's
verdicts arrive in the background (read from the memory admin API); then the same
user asks a related question, and the demo prints the memory block the agent model
saw, tag included, and its answer, in mode ``dmt`` and, for contrast, ``off``.

Everything is real: llama.cpp serves the agent and the auditor, the proxy runs as
its own process on a fresh state directory, and the chat requests go through it
with the ``openai`` SDK. To show the prompt without adding a route that would
expose memories, the demo's policy sends the agent model's traffic through a
small relay in this process that keeps a copy of each request body.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import yaml

from dmt_proxy.cli.demo_view import (
    INDENT,
    Remark,
    abbreviate,
    indented,
    label_of,
    labelled,
    memory_block,
    progress_line,
    settled,
    summary_line,
    timeout_message,
    verdict_line,
)
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.net import free_port
from dmt_proxy.policy import Policy, default_policy_path, load_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.upstream import launcher, local_models
from dmt_proxy.upstream.models import local_model_port

if TYPE_CHECKING:
    from openai import OpenAI

# The neutral remark scores low in the embedding first stage, so it is cleared without an
# LLM call; the biased one goes on to the auditor. Both were checked against the shipped
# first stage and the 1.5B auditor (see the demo's end-to-end test).
NEUTRAL = Remark(
    "neutral",
    "In one sentence, what is the difference between a task and a milestone in project tracking?",
)
BIASED = Remark(
    "biased",
    "Linda is 61, so I won't waste the training on the new app on her; people her age never "
    "really get new technology. In one sentence: how should I plan the switch?",
)
LATER = (
    "Linda (61) and Tom (27) both asked to lead the rollout of the new app. "
    "Who should lead it? Answer in one sentence."
)


@dataclass(frozen=True)
class DemoOptions:
    """What ``dmt-proxy demo`` was asked to do."""

    model: str = "qwen2.5-0.5b"
    user: str = "demo-user"
    audit_timeout_s: float = 120.0
    contrast: bool = True
    """Also ask the later question in mode ``off`` (memories shown without tags)."""
    console: bool = False
    """Afterwards keep the proxy serving its review console (``/console``) until Ctrl-C."""


def say(text: str) -> None:
    print(text, flush=True)


def complain(text: str) -> None:
    """An error line: on stderr, so a script can tell it from the demo's story."""
    print(f"[demo] error: {text}", file=sys.stderr, flush=True)


class PromptTap:
    """A pass-through HTTP relay in front of a model server that keeps each request body."""

    def __init__(self, upstream_root: str) -> None:
        self.upstream_root = upstream_root.rstrip("/")
        self._bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def bodies(self) -> list[dict[str, Any]]:
        """A copy of the JSON bodies relayed so far, oldest first."""
        with self._lock:
            return list(self._bodies)

    def start(self) -> PromptTap:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket (also when it never started)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def _keep(self, raw: bytes) -> None:
        try:
            body = json.loads(raw)
        except ValueError:
            return
        if isinstance(body, dict):
            with self._lock:
                self._bodies.append(body)

    def _forward(self, path: str, raw: bytes) -> tuple[int, str, bytes]:
        request = urllib.request.Request(
            self.upstream_root + path, data=raw, method="POST",
            headers={"content-type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=600) as resp:
                return resp.status, resp.headers.get("content-type", ""), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.headers.get("content-type", ""), exc.read()
        except OSError as exc:
            error = {"error": {"message": f"relay: {exc}", "type": "upstream_error"}}
            return 502, "application/json", json.dumps(error).encode()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        tap = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("content-length") or 0))
                tap._keep(raw)
                status, content_type, body = tap._forward(self.path, raw)
                self.send_response(status)
                self.send_header("content-type", content_type or "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return  # the demo's own output is the log

        return Handler


def write_demo_policy(settings: Settings, agent: local_models.LocalModel, tap_url: str,
                      path: Path) -> Policy:  # fmt: skip
    """The configured policy, with the agent model's alias routed through the relay."""
    source = settings.policy_file or default_policy_path()
    raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    if not isinstance(raw, dict):
        raise ConfigError(f"policy {source}: expected a mapping at the top level")
    # A policy alias of the same name takes precedence over the built-in local route.
    models = dict(raw.get("models") or {})
    models[agent.alias] = {"model": f"openai/{agent.name}", "api_base": tap_url}
    raw["models"] = models
    path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
    return load_policy(path)


def local_model_of(alias: str) -> local_models.LocalModel | None:
    """The embedded model behind ``local/<name>``, or None for any other model name."""
    prefix, _, name = alias.partition("/")
    if prefix != "local" or name not in local_models.LOCAL_MODELS:
        return None
    return local_models.LOCAL_MODELS[name]


def start_models(settings: Settings, models: list[local_models.LocalModel]) -> None:
    """Start every model server at once (each is a no-op when already healthy)."""
    with ThreadPoolExecutor(max_workers=len(models)) as pool:
        for future in [pool.submit(launcher.start, settings, m) for m in models]:
            future.result()


def start_proxy(state_dir: Path, port: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = (state_dir / "proxy.log").open("ab")
    cmd = [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)  # fmt: skip
    log.close()
    return proc


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"the proxy exited during start-up (code {proc.returncode})")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise ConfigError(f"the proxy did not become healthy at {url} within {timeout_s:.0f}s")


class AdminApi:
    """The two admin routes the demo reads: the user's memories and the outbox depth."""

    def __init__(self, base_url: str, admin_key: str) -> None:
        self._client = httpx.Client(
            base_url=base_url, headers={"authorization": f"Bearer {admin_key}"}, timeout=30
        )

    def memories(self, user: str) -> list[MemoryEntry]:
        resp = self._client.get("/memories", params={"user": user})
        resp.raise_for_status()
        return [MemoryEntry.model_validate(row) for row in resp.json()["data"]]

    def outbox(self) -> dict[str, Any] | None:
        try:
            resp = self._client.get("/admin/outbox")
            resp.raise_for_status()
            return dict(resp.json())
        except httpx.HTTPError:
            return None

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class Reply:
    answer: str
    seconds: float
    memories: str | None
    """``x-dmt-memories``: how many memories the proxy retrieved into the prompt."""


def chat(client: OpenAI, model: str, text: str, user: str, *, mode: str,
         memory: str = "read-write", max_tokens: int = 48) -> Reply:  # fmt: skip
    """One chat request through the proxy, in mitigation ``mode``."""
    started = time.perf_counter()
    raw = client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], user=user,
        max_tokens=max_tokens, temperature=0,
        extra_headers={"X-DMT-Mode": mode, "X-DMT-Memory": memory},
    )  # fmt: skip
    completion = raw.parse()
    return Reply(
        answer=(completion.choices[0].message.content or "").strip(),
        seconds=time.perf_counter() - started,
        memories=raw.headers.get("x-dmt-memories"),
    )


def wait_for_audits(admin: AdminApi, user: str, remarks: list[Remark],
                    timeout_s: float) -> list[MemoryEntry] | None:  # fmt: skip
    """Poll the admin API, printing each verdict as it arrives; None on timeout."""
    started = time.monotonic()
    reported: set[str] = set()
    last_progress = ""
    last_printed = started
    rows: list[MemoryEntry] = []
    while True:
        rows = admin.memories(user)
        for row in rows:
            if settled(row) and row.id not in reported:
                reported.add(row.id)
                say(verdict_line(row, label_of(row, remarks)))
        if len(rows) >= len(remarks) and all(settled(r) for r in rows):
            return rows
        elapsed = time.monotonic() - started
        if elapsed > timeout_s:
            complain(timeout_message(rows, len(remarks), timeout_s, admin.outbox()))
            return None
        line = progress_line(rows, len(remarks), elapsed)
        # A line when the state changes, and one every 10 s so a slow auditor is visibly alive.
        if line.split("(")[0] != last_progress or time.monotonic() - last_printed >= 10:
            say(line)
            last_progress, last_printed = line.split("(")[0], time.monotonic()
        time.sleep(0.5)


def run_demo(settings: Settings, options: DemoOptions) -> int:
    """Run the whole demo; 0 when every audit finished, 1 when one did not."""
    from openai import APIError, OpenAI

    t0 = time.perf_counter()
    agent = local_models.get_model(options.model)
    if threading.current_thread() is threading.main_thread():
        # SIGTERM becomes SystemExit, so the cleanup below still stops the proxy it started.
        signal.signal(signal.SIGTERM, lambda signum, _frame: sys.exit(128 + signum))
    state_dir = Path(tempfile.mkdtemp(prefix="dmt-demo-"))
    tap = PromptTap(f"http://{settings.models_host}:{local_model_port(settings, agent.name)}")
    port = free_port()
    base_url = f"http://127.0.0.1:{port}/v1"
    admin_key = secrets.token_urlsafe(24)
    proc: subprocess.Popen[bytes] | None = None
    admin = AdminApi(base_url, admin_key)
    ok = False
    try:
        policy = write_demo_policy(settings, agent, tap.base_url, state_dir / "policy.yaml")
        auditor = local_model_of(policy.audit.auditor_model)
        env = {
            **os.environ,
            "DMT_STATE_DIR": str(state_dir),
            "DMT_PORT": str(port),
            "DMT_ADMIN_KEY": admin_key,
            "DMT_POLICY_FILE": str(state_dir / "policy.yaml"),
        }
        env.pop("DMT_TENANTS_FILE", None)  # the demo's requests carry no tenant key
        say("dmt-proxy demo: one user, a neutral and a biased remark, the audit, a later question.")
        say(f"[1/4] starting the agent {agent.alias}, the auditor {policy.audit.auditor_model} "
            f"and the proxy on {base_url}")  # fmt: skip
        proc = start_proxy(state_dir, port, env)
        tap.start()
        start_models(settings, [agent] + ([auditor] if auditor and auditor != agent else []))
        wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
        say(f"{INDENT}ready after {time.perf_counter() - t0:.0f}s (fresh memory store in "
            f"{state_dir})")  # fmt: skip
        client = OpenAI(base_url=base_url, api_key="not-needed-locally")
        summary = _conversation(client, admin, tap, agent, options, policy)
        if summary is None:
            return 1
        ok = True
        say(f"{summary} ({time.perf_counter() - t0:.0f}s in all)")
        if options.console:
            _serve_console(proc, port, admin_key)
        return 0
    except APIError as exc:
        complain(f"the proxy answered {exc}")
        return 1
    finally:
        admin.close()
        tap.stop()
        if proc is not None:
            _stop(proc)
        if ok:
            shutil.rmtree(state_dir, ignore_errors=True)
        else:
            print(f"[demo] proxy log and memory kept in {state_dir} (proxy.log)", file=sys.stderr)


def _conversation(client: OpenAI, admin: AdminApi, tap: PromptTap, agent: local_models.LocalModel,
                  options: DemoOptions, policy: Policy) -> str | None:  # fmt: skip
    """The four steps after start-up; returns the summary line, or None when an audit failed."""
    user, remarks = options.user, [NEUTRAL, BIASED]
    say(f"[2/4] user {user!r} says two things (mode dmt: each exchange is stored as a memory)")
    for remark in remarks:
        say(labelled(remark.label, remark.text))
        reply = chat(client, agent.alias, remark.text, user, mode="dmt")
        say(labelled(f"agent ({reply.seconds:.1f}s)", reply.answer, indent=INDENT + "  "))

    say(f"[3/4] the auditor {policy.audit.auditor_model} judges each memory in the background "
        f"(tagged when its score >= {policy.audit.tau})")  # fmt: skip
    rows = wait_for_audits(admin, user, remarks, options.audit_timeout_s)
    if rows is None:
        return None
    if any(r.audit_status is AuditStatus.FAILED for r in rows):
        complain("an audit failed (the auditor gave no valid verdict); see the proxy log")
        return None

    say("[4/4] later, the same user asks (read-only: not stored, so both modes see the same "
        "memories):")  # fmt: skip
    say(labelled("question", LATER))
    seen = len(tap.bodies())
    reply = chat(client, agent.alias, LATER, user, mode="dmt", memory="read-only")
    block = next((b for b in map(_block_of, tap.bodies()[seen:]) if b), None)
    say(f"{INDENT}the memory block the model saw in mode dmt ({reply.memories or 0} retrieved; "
        "long lines cut here):")  # fmt: skip
    say(indented(abbreviate(block)) if block else f"{INDENT}  (none)")
    say(labelled(f"agent, mode dmt ({reply.seconds:.1f}s)", reply.answer))
    if options.contrast:
        off = chat(client, agent.alias, LATER, user, mode="off", memory="read-only")
        say(labelled(f"agent, mode off, memories without tags ({off.seconds:.1f}s)", off.answer))
    tag_in_prompt = block is not None and '"bias_tag"' in block
    return summary_line(rows, tag_in_prompt=tag_in_prompt)


def _serve_console(proc: subprocess.Popen[bytes], port: int, admin_key: str) -> None:
    """Keep the demo's proxy up for its review console until Ctrl-C (or the proxy exits)."""
    say(f"review console: http://127.0.0.1:{port}/console (sign in with the admin key "
        f"{admin_key}); the demo's tagged memory waits in the review queue. Ctrl-C stops.")  # fmt: skip
    try:
        while proc.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        pass


def _block_of(body: dict[str, Any]) -> str | None:
    messages = body.get("messages")
    return memory_block(messages) if isinstance(messages, list) else None


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
