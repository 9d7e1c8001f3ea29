"""The generic plugin registry: decorator, lazy built-ins, entry points, contract configs."""

from __future__ import annotations

import importlib
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


# Built-ins are declared as entry points, in pyproject.toml, like outside plugins.

REGISTRIES = {
    "dmt_proxy.memory_backends": "dmt_proxy.memory.registry:MEMORY_BACKENDS",
    "dmt_proxy.upstream_clients": "dmt_proxy.upstream.clients:UPSTREAM_CLIENTS",
    "dmt_proxy.auditors": "dmt_proxy.audit.registry:AUDITORS",
    "dmt_proxy.dib_domains": "dmt_bench.dib.domains.base:DIB_DOMAINS",
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
