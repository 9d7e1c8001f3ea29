"""``dmt-proxy demo``: start the local model and the proxy, send one real request, print it.

Everything is real: llama.cpp serves the embedded model, the proxy runs as its
own process, and the request goes through it with the ``openai`` SDK.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings
from dmt_proxy.upstream import launcher, local_models


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


def run_demo(settings: Settings, model_name: str, question: str, user: str) -> int:
    from openai import OpenAI

    model = local_models.get_model(model_name)
    print(f"[demo] model {model.alias}: {model.description}", flush=True)
    launcher.start(settings, model)
    port = free_port()
    state_dir = Path(settings.state_dir) / "demo"
    env = {**os.environ, "DMT_STATE_DIR": str(state_dir), "DMT_PORT": str(port)}
    cmd = [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(port)]
    print(f"[demo] starting the proxy on http://127.0.0.1:{port}/v1", flush=True)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_healthy(f"http://127.0.0.1:{port}/healthz", proc)
        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="not-needed-locally")
        print(f"[demo] user {user!r} asks: {question}", flush=True)
        started = time.perf_counter()
        raw = client.chat.completions.with_raw_response.create(
            model=model.alias,
            messages=[{"role": "user", "content": question}],
            user=user,
            max_tokens=200,
            temperature=0,
        )
        completion = raw.parse()
        elapsed = time.perf_counter() - started
        print("\n" + (completion.choices[0].message.content or "").strip() + "\n", flush=True)
        print(
            f"[demo] {elapsed:.2f}s total, proxy overhead {raw.headers.get('x-dmt-overhead-ms')} ms, "
            f"mode {raw.headers.get('x-dmt-mode')}, memory: {raw.headers.get('x-dmt-memory', 'on')}",
            flush=True,
        )
        return 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
