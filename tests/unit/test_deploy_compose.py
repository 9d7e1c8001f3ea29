"""docker-compose.yml, the Dockerfile and the deploy scripts, validated offline.

No Docker engine (nor the compose plugin) runs on these machines: the compose
file is validated against the Compose specification with compose-spec, and
cross-references (services, volumes, mounted files, ports, env vars) are
checked against the repository. ``docker compose config`` runs too where the
plugin exists.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from compose_spec import PyCompose

from dmt_proxy.cli.proxy_cli import build_parser
from dmt_proxy.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
DOCKERFILE = DEPLOY / "Dockerfile"
ENTRYPOINT = DEPLOY / "docker" / "models-entrypoint.sh"
NON_SETTINGS_ENV = {"DMT_SERVE_MODELS"}
EXPECTED_SERVICES = {
    "proxy",
    "worker",
    "models",
    "postgres",
    "prometheus",
    "alertmanager",
    "grafana",
}


def compose() -> dict[str, Any]:
    return dict(yaml.safe_load(COMPOSE.read_text()))


def pyproject() -> dict[str, Any]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_compose_is_valid_against_the_compose_spec() -> None:
    # compose-spec does not expand YAML merge keys (`<<:`); PyYAML does, as Docker does.
    spec = PyCompose.from_json(json.dumps(compose()))
    spec.validate()
    spec.to_spec()
    assert set(spec.service_names()) == EXPECTED_SERVICES


def test_compose_validator_rejects_a_misspelt_key() -> None:
    bad = compose()
    bad["services"]["proxy"]["enviroment"] = {"X": "1"}
    with pytest.raises(ValueError, match="enviroment"):
        PyCompose.from_json(json.dumps(bad))


def test_compose_references_resolve() -> None:
    doc = compose()
    services = doc["services"]
    named_volumes = set(doc.get("volumes") or {})
    for name, svc in services.items():
        deps = svc.get("depends_on") or {}
        for dep, cond in deps.items() if isinstance(deps, dict) else ((d, {}) for d in deps):
            assert dep in services, f"{name} depends on unknown {dep}"
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in services[dep], f"{dep} has no healthcheck"
        for volume in svc.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name}: {source} does not exist"
            else:
                assert source in named_volumes, f"{name}: volume {source} not declared"
        image = svc.get("image", "")
        tag = image.rsplit(":", 1)[1] if ":" in image else ""
        assert tag and tag != "latest", f"{name}: pin an image tag ({image!r})"
        if "build" in svc:
            context = DEPLOY / svc["build"]["context"]
            assert (context / svc["build"]["dockerfile"]).is_file()


def test_compose_env_and_wiring_match_the_proxy() -> None:
    services = compose()["services"]
    fields = {f"DMT_{n.upper()}" for n in Settings.model_fields}
    for name in ("proxy", "worker", "models"):
        for var in services[name]["environment"]:
            if var.startswith("DMT_"):
                assert var in fields | NON_SETTINGS_ENV, f"{name}: {var} is not a Settings field"
    proxy_env = services["proxy"]["environment"]
    assert proxy_env["DMT_MODELS_HOST"] in services
    assert proxy_env["DMT_POLICY_FILE"] in {v.split(":")[1] for v in services["proxy"]["volumes"]}
    # Proxies only enqueue; the worker drains the same PostgreSQL outbox.
    worker_env = services["worker"]["environment"]
    assert proxy_env["DMT_WORKER"] == "off"
    assert proxy_env["DMT_DATABASE_URL"] == worker_env["DMT_DATABASE_URL"]
    assert "@postgres:5432/" in proxy_env["DMT_DATABASE_URL"]
    assert services["worker"]["volumes"] == [
        v for v in services["proxy"]["volumes"] if "policy" in v
    ]
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    job = next(j for j in prom["scrape_configs"] if j["job_name"] == "dmt-proxy")
    assert job["static_configs"][0]["targets"] == [f"proxy:{proxy_env['DMT_PORT']}"]
    for am in prom["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"]:
        assert am.split(":")[0] in services
    ds = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    assert ds["datasources"][0]["url"] == "http://prometheus:9090"


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        current += line[:-1] + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            logical.append(current)
            current = ""
    return [(ln.split(None, 1)[0].upper(), ln.split(None, 1)[1]) for ln in logical]


def test_dockerfile_base_image_and_commands() -> None:
    instructions = dockerfile_instructions()
    assert instructions[0] == ("FROM", "python:3.11-slim")
    cmd = json.loads(next(args for ins, args in instructions if ins == "CMD"))
    assert cmd[0] in pyproject()["project"]["scripts"]
    build_parser().parse_args(cmd[1:])  # a real dmt-proxy subcommand


def test_dockerfile_references_existing_repo_files() -> None:
    text = " ".join(args for _, args in dockerfile_instructions())
    paths = set(re.findall(r"(?<![\w.-])((?:scripts|deploy|policies|auditor_prompts)/[\w./-]+)",
                           text.replace("/app/", "")))  # fmt: skip
    assert paths, "expected the Dockerfile to reference repository files"
    for path in paths:
        assert (REPO / path).exists(), f"Dockerfile references missing {path}"


def test_dockerfile_installs_real_extras_and_pins() -> None:
    meta = pyproject()
    extras = set(meta["project"]["optional-dependencies"])
    runs = [args for ins, args in dockerfile_instructions() if ins == "RUN"]
    installs = [shlex.split(r) for r in runs if "pip install" in r]
    assert any("-e" in words for words in installs), "install the project editable, as in setup"
    pins = {
        req.split("==")[0].lower(): req.split("==")[1]
        for reqs in meta["project"]["optional-dependencies"].values()
        for req in reqs
        if "==" in req
    }
    for words in installs:
        for word in words:
            match = re.fullmatch(r"\.\[([\w,-]+)\]", word)
            if match:
                assert set(match[1].split(",")) <= extras, f"unknown extra in {word}"
            name, _, version = word.partition("==")
            if version and name.lower() in pins:
                assert pins[name.lower()] == version, f"{word} differs from pyproject"


def test_dockerignore_keeps_what_the_image_needs() -> None:
    patterns = [
        line.strip() for line in (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]  # fmt: skip
    needed = ["pyproject.toml", "dmt_proxy/__init__.py", "policies/default.yaml",
              "auditor_prompts", "deploy/docker/models-entrypoint.sh"]  # fmt: skip
    for path in needed:
        for pattern in patterns:
            pat = pattern.removeprefix("**/")
            assert not fnmatch.fnmatch(path, pat) and not path.startswith(pat + "/"), (
                f"{pattern} excludes {path}"
            )
