"""The deploy tools run for real: shell scripts parse, the model-server entrypoint's
embedded Python prints the launcher's command, the generated Kubernetes manifests are
in sync with their generator, and ``docker compose config`` where the plugin exists.
The files themselves are checked offline in ``tests/unit/test_deploy_*.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.test_deploy_compose import COMPOSE, ENTRYPOINT, REPO, compose

K8S = REPO / "deploy" / "k8s"


@pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0,
    reason="docker compose plugin not available on this machine (validated with compose-spec)",
)
def test_docker_compose_config() -> None:
    proc = subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("script", [ENTRYPOINT, REPO / "scripts" / "install_prometheus.sh"])
def test_shell_scripts_parse_and_are_executable(script: Path) -> None:
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert os.access(script, os.X_OK), f"chmod +x {script}"


def test_models_entrypoint_asks_the_launcher_for_its_command(tmp_path: Path) -> None:
    # Run the entrypoint's embedded Python (not the servers): the command must
    # bind 0.0.0.0 on the launcher's port for the model.
    text = ENTRYPOINT.read_text()
    snippet = text.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    fake_binary = tmp_path / "llama-server"
    fake_binary.write_text("")
    env = {**os.environ, "DMT_MODELS_HOST": "0.0.0.0", "DMT_LLAMA_SERVER": str(fake_binary),
           "DMT_MODELS_PORT_BASE": "8091", "DMT_CACHE_DIR": str(tmp_path)}  # fmt: skip
    proc = subprocess.run([sys.executable, "-", "qwen2.5-1.5b"], input=snippet, env=env,
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cmd = proc.stdout.splitlines()
    assert cmd[0] == str(fake_binary)
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--port") + 1] == "8092"
    compose_ports = compose()["services"]["models"]["expose"]
    assert "8092" in compose_ports


def test_generated_manifests_are_in_sync() -> None:
    proc = subprocess.run(
        [sys.executable, str(K8S / "sync.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
