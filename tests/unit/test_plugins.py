"""The generic plugin registry: decorator, lazy built-ins, entry points, contract configs."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmt_proxy.errors import ConfigError
from dmt_proxy.plugins import Registry, declared_builtins

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def unique() -> str:
    return f"plug_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def plugin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on ``sys.path``; the modules imported from it are forgotten afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if name.startswith("plug_"):
            del sys.modules[name]


def _write_host(directory: Path, module: str, group: str, builtins: dict[str, str]) -> None:
    """A module holding a registry, importable by plugin modules written next to it."""
    (directory / f"{module}.py").write_text(
        textwrap.dedent(f"""
            from dmt_proxy.plugins import Registry
            REGISTRY = Registry("widget", group={group!r}, builtins={builtins!r},
                                install_hints={{"needy": "pip install widgets-extra"}})
        """),
        encoding="utf-8",
    )


def _write_plugin(directory: Path, module: str, host: str, name: str) -> None:
    (directory / f"{module}.py").write_text(
        textwrap.dedent(f"""
            from {host} import REGISTRY

            @REGISTRY.register({name!r})
            class Widget:
                pass
        """),
        encoding="utf-8",
    )


def test_register_names_the_class_and_rejects_a_second_owner() -> None:
    registry: Registry[type[Any]] = Registry("widget", group="test.none", builtins={})

    @registry.register("round")
    class Round:
        pass

    assert registry.get("round") is Round and Round.name == "round"  # type: ignore[attr-defined]
    assert registry.register("round")(Round) is Round  # registering the same class again is fine
    with pytest.raises(ValueError, match="widget 'round' is already registered"):
        registry.register("round")(type("Square", (), {}))
    assert registry.names() == ["round"]


def test_the_check_runs_before_anything_is_registered() -> None:
    def check(name: str, obj: Any) -> None:
        if not hasattr(obj, "spin"):
            raise TypeError(f"widget {name} cannot spin")

    registry: Registry[type[Any]] = Registry("widget", group="test.none", builtins={}, check=check)
    with pytest.raises(TypeError, match="widget flat cannot spin"):
        registry.register("flat")(type("Flat", (), {}))
    assert registry.names() == []


def test_unknown_name_lists_the_known_ones() -> None:
    registry: Registry[type[Any]] = Registry(
        "widget", group="test.none", builtins={"b": "nowhere.b", "a": "nowhere.a"}
    )
    with pytest.raises(ConfigError, match=r"unknown widget 'c'; known widgets: a, b"):
        registry.get("c")


def test_builtins_are_imported_only_when_asked_for(plugin_dir: Path, unique: str) -> None:
    host, plugin = f"{unique}_host", f"{unique}_impl"
    _write_host(plugin_dir, host, "test.none", {"gear": plugin})
    _write_plugin(plugin_dir, plugin, host, "gear")
    registry = __import__(host).REGISTRY
    assert registry.names() == ["gear"] and plugin not in sys.modules
    assert registry.get("gear").__name__ == "Widget" and plugin in sys.modules
    assert list(registry.load_all()) == ["gear"]


def test_a_builtin_that_cannot_be_imported_names_what_to_install(
    plugin_dir: Path, unique: str
) -> None:
    host = f"{unique}_host"
    (plugin_dir / f"{unique}_needy.py").write_text("import no_such_package_xyz\n")
    _write_host(plugin_dir, host, "test.none", {"needy": f"{unique}_needy"})
    with pytest.raises(ConfigError, match=r"'needy' needs packages .*pip install widgets-extra"):
        __import__(host).REGISTRY.get("needy")


def test_a_module_that_does_not_register_is_a_config_error(plugin_dir: Path, unique: str) -> None:
    host = f"{unique}_host"
    (plugin_dir / f"{unique}_empty.py").write_text("X = 1\n")
    _write_host(plugin_dir, host, "test.none", {"gear": f"{unique}_empty"})
    with pytest.raises(ConfigError, match=f"{unique}_empty did not register widget 'gear'"):
        __import__(host).REGISTRY.get("gear")


def test_an_outside_package_registers_through_its_entry_point(
    plugin_dir: Path, unique: str
) -> None:
    group = f"dmt_proxy.test_{unique}"
    host, plugin = f"{unique}_host", f"{unique}_outside"
    _write_host(plugin_dir, host, group, {})
    _write_plugin(plugin_dir, plugin, host, "cog")
    # What `pip install` of a package declaring the entry point leaves on sys.path.
    dist = plugin_dir / f"{unique}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {unique}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{group}]\ncog = {plugin}:Widget\n")
    registry = __import__(host).REGISTRY
    assert registry.names() == ["cog"] and plugin not in sys.modules
    assert registry.get("cog").name == "cog"


LAZY = textwrap.dedent("""
    import json, sys
    from dmt_proxy.memory.registry import create_backend, known_backends
    from dmt_proxy.memory.registry import backend_class
    from dmt_proxy.audit.registry import known_auditors
    from dmt_proxy.bench.dib.domains.base import DIB_DOMAINS
    from dmt_proxy.upstream.clients import client_class, known_clients
    out = {"names": [known_backends(), known_auditors(), DIB_DOMAINS.names(), known_clients()]}
    backend_class("memory")
    client_class("litellm")  # its module is imported; litellm itself only on the first call
    heavy = ("mem0", "langgraph", "langmem", "qdrant_client", "litellm", "torch")
    out["loaded"] = sorted(m for m in heavy if m in sys.modules)
    out["dib"] = sorted(m for m in sys.modules if m.startswith("dmt_proxy.bench.dib.domains."))
    print(json.dumps(out))
""")


def test_listing_plugins_imports_none_of_the_heavy_ones() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    backends, auditors, dib, clients = out["names"]
    assert {"memory", "mem0", "langmem", "letta"} <= set(backends)
    assert {"auto", "litellm", "openai-compat"} <= set(clients)
    assert {"llm", "scripted"} <= set(auditors) and len(dib) == 9
    assert out["loaded"] == []
    assert out["dib"] == ["dmt_proxy.bench.dib.domains.base"]


# Built-ins are declared as entry points, in pyproject.toml, like outside plugins.

REGISTRIES = {
    "dmt_proxy.memory_backends": "dmt_proxy.memory.registry:MEMORY_BACKENDS",
    "dmt_proxy.upstream_clients": "dmt_proxy.upstream.clients:UPSTREAM_CLIENTS",
    "dmt_proxy.auditors": "dmt_proxy.audit.registry:AUDITORS",
    "dmt_proxy.dib_domains": "dmt_proxy.bench.dib.domains.base:DIB_DOMAINS",
}


def _registry(path: str) -> Registry[Any]:
    module, attr = path.split(":")
    found: Registry[Any] = getattr(importlib.import_module(module), attr)
    return found


def test_builtins_are_the_entry_points_pyproject_declares() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    groups = declared["entry-points"]
    assert set(REGISTRIES) <= set(groups)
    for group, path in REGISTRIES.items():
        registry = _registry(path)
        assert registry.group == group
        assert declared_builtins(group) == groups[group]
        assert all(registry.is_builtin(name) for name in groups[group])
        assert set(groups[group]) <= set(registry.names())


@pytest.mark.parametrize("group", sorted(REGISTRIES))
def test_every_builtin_declares_its_contract_config(group: str) -> None:
    registry = _registry(REGISTRIES[group])
    for name in declared_builtins(group):
        try:
            plugin = registry.get(name)
        except ConfigError as exc:  # an optional extra that is not installed here
            pytest.skip(str(exc))
        assert callable(getattr(plugin, "contract_config", None)), f"{group}: {name}"
        assert callable(getattr(plugin, "from_config", None)), f"{group}: {name}"


def test_a_plugin_without_contract_config_says_why_it_cannot_be_tested(
    plugin_dir: Path, unique: str
) -> None:
    host, plugin = f"{unique}_host", f"{unique}_bare"
    _write_host(plugin_dir, host, "test.none", {"bare": plugin})
    _write_plugin(plugin_dir, plugin, host, "bare")
    with pytest.raises(LookupError, match=rf"widget 'bare' \(from {plugin}\) declares no contract"):
        __import__(host).REGISTRY.contract_config("bare")


INSTALLED = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, sys.argv[1])
    from dmt_proxy import plugins
    print(json.dumps({"source": plugins._source_declaration(),
                      "builtins": plugins.declared_builtins("dmt_proxy.auditors"),
                      "outside": plugins.outside_plugins("dmt_proxy.auditors")}))
""")


def test_an_installed_wheel_reads_its_builtins_from_its_metadata(tmp_path: Path) -> None:
    # The layout pip leaves for a wheel: the package and its dist-info, no pyproject.toml.
    site = tmp_path / "site"
    (site / "dmt_proxy").mkdir(parents=True)
    for name in ("__init__.py", "plugins.py", "errors.py"):
        shutil.copy(ROOT / "dmt_proxy" / name, site / "dmt_proxy" / name)
    dist = site / "dmt_proxy-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: dmt-proxy\nVersion: 0.1.0\n")
    (dist / "entry_points.txt").write_text("[dmt_proxy.auditors]\nllm = dmt_proxy.audit.auditor\n")
    # -S: no site-packages, so a dmt-proxy installed there (editable) is not seen.
    proc = subprocess.run(
        [sys.executable, "-I", "-S", "-c", INSTALLED, str(site)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["source"] is None
    assert out["builtins"] == {"llm": "dmt_proxy.audit.auditor"}
    assert "llm" not in out["outside"]  # dmt-proxy's own entry points are never "outside"


def test_an_installed_auditor_without_contract_config_is_skipped(
    plugin_dir: Path, unique: str
) -> None:
    (plugin_dir / f"{unique}_auditor.py").write_text(
        textwrap.dedent("""
            from dmt_proxy.audit.registry import register_auditor

            @register_auditor("bare")
            class Bare:
                @classmethod
                def from_config(cls, config):
                    return cls()
        """),
        encoding="utf-8",
    )
    dist = plugin_dir / f"{unique}-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {unique}\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[dmt_proxy.auditors]\nbare = {unique}_auditor\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-k", "bare",
         str(ROOT / "tests" / "unit" / "test_auditor_contract.py")],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "failed" not in proc.stdout and "skipped" in proc.stdout
    assert f"auditor 'bare' (from {unique}_auditor) declares no contract_config" in proc.stdout
