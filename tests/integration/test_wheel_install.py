"""A wheel built from the sdist carries its data and starts ``dmt-proxy serve``.

The sdist and the wheel are built offline with the setuptools already installed
(PEP 517 hooks, ``pip wheel --no-build-isolation``), from a copy of the sources,
so the checkout gets no ``build/`` or ``*.egg-info``. The wheel goes into a fresh
venv with ``--no-deps``; that venv sees this environment's dependencies through
a ``.pth`` file of plain paths (``.pth`` files in those directories, such as the
editable install's finder, are not run), so ``dmt_proxy`` can only come from the
wheel. Everything then runs from a directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest

from dmt_proxy.net import free_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md")
TREES = ("dmt_proxy", "dmt_bench", "policies", "auditor_prompts")
SHIPPED = ("policies", "auditor_prompts", "dmt_proxy/data/mmlu_pro")
CONSOLE = "dmt_proxy/api/console"
"""The review console's templates and assets: package data, served from the wheel."""

POLICY = """\
version: 1
name: wheel-smoke
mode: dmt
default_model: fast
models:
  fast: {model: openai/fast, api_base: "http://127.0.0.1:9/v1"}
memory: {backend: memory, top_k: 3}
audit: {auditor_model: fast, first_stage: "off", timeout_s: 5, max_attempts: 1}
"""

CHECK = """\
import json, dmt_proxy
from dmt_proxy.audit.registry import known_auditors
from dmt_bench.dib.domains.base import DIB_DOMAINS
from dmt_proxy.memory.registry import known_backends
from dmt_proxy.policy import load_policy
from dmt_proxy.resources import data_dir
from dmt_proxy.upstream.clients import known_clients
print(json.dumps({
    "package": dmt_proxy.__file__,
    "dirs": [str(data_dir(n)) for n in ("policies", "auditor_prompts", "mmlu_pro")],
    "default_policy": load_policy().name,
    "plugins": [known_backends(), known_clients(), known_auditors(), DIB_DOMAINS.names()],
}))
"""


def _run(*cmd: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"{cmd}:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    skip = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        shutil.copy2(ROOT / name, src / name)
    for name in TREES:
        shutil.copytree(ROOT / name, src / name, ignore=skip)
    hook = "import sys; from setuptools import build_meta as b; print(b.build_sdist(sys.argv[1]))"
    sdist = tmp / "sdist" / _run(sys.executable, "-c", hook, tmp / "sdist", cwd=src).split()[-1]
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", tmp / "dist", unpacked, cwd=tmp)  # fmt: skip
    (wheel,) = (tmp / "dist").glob("dmt_proxy-*.whl")
    return wheel


def _venv_with_wheel(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp)
    python = venv / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
         "-q", wheel, cwd=tmp)  # fmt: skip
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp)
    ours = sysconfig.get_paths()
    deps = dict.fromkeys([ours["purelib"], ours["platlib"]])  # this env's deps, not its .pth
    (Path(site.strip()) / "_dependencies.pth").write_text("\n".join(deps) + "\n")
    return venv


def _clean_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DMT_")}
    env.update({
        "DMT_STATE_DIR": str(tmp / "state"),
        # the fake upstream is never called; no hosted provider, no local model server
        "DMT_ALLOW_PROVIDER_MODELS": "false",
        "DMT_MODELS_PORT_BASE": str(free_port()),
        "DMT_LOG_LEVEL": "warning",
    })  # fmt: skip
    return env


def test_wheel_carries_data_and_serves(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        for shipped in SHIPPED:
            inside = "dmt_proxy/data/" + shipped.rsplit("/", 1)[-1]
            files = sorted(p for p in (ROOT / shipped).rglob("*") if p.is_file())
            assert files
            for path in files:
                arcname = f"{inside}/{path.relative_to(ROOT / shipped).as_posix()}"
                assert arcname in names, arcname
                assert zf.read(arcname) == path.read_bytes(), arcname
        console = sorted(p for p in (ROOT / CONSOLE).rglob("*") if p.is_file()
                         and p.suffix in (".html", ".css", ".js"))  # fmt: skip
        assert len(console) >= 8
        for path in console:
            arcname = path.relative_to(ROOT).as_posix()
            assert zf.read(arcname) == path.read_bytes(), arcname

    venv = _venv_with_wheel(tmp_path, wheel)
    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    assert not run_dir.is_relative_to(ROOT)
    env = _clean_env(tmp_path)
    got = json.loads(_run(venv / "bin" / "python", "-c", CHECK, cwd=run_dir, env=env))
    assert Path(got["package"]).is_relative_to(venv)
    assert all(Path(d).is_relative_to(venv) for d in got["dirs"])
    assert got["default_policy"] == "default"
    # No pyproject.toml beside the installed package: the built-ins come from the wheel's
    # entry points (dmt_proxy/plugins.py).
    backends, clients, auditors, domains = got["plugins"]
    assert {"memory", "mem0", "langmem", "letta", "postgres"} <= set(backends)
    assert {"auto", "litellm", "openai-compat"} <= set(clients)
    assert {"llm", "scripted"} <= set(auditors) and len(domains) == 9
    # The research harness ships in the same wheel, with its own command.
    bench_help = _run(venv / "bin" / "dmt-bench", "--help", cwd=run_dir, env=env)
    assert "compare" in bench_help

    (run_dir / "policy.yaml").write_text(POLICY)
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [venv / "bin" / "dmt-proxy", "serve", "--port", str(port), "--policy", "policy.yaml"],
        cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    log.close()
    try:
        deadline = time.monotonic() + 120
        health = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    health = json.loads(r.read())
                    break
            except OSError:
                time.sleep(0.3)
        assert health is not None, (tmp_path / "serve.log").read_text()[-3000:]
        assert health["status"] == "ok"
        base = f"http://127.0.0.1:{port}"
        for path in ("/console/login", "/console/static/console.js"):  # offline, from the wheel
            # The fresh process's first pages: a hang guard, not a pace.
            with urllib.request.urlopen(base + path, timeout=60) as r:
                assert r.status == 200 and r.read(), path
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
