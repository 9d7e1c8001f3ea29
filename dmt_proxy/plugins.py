"""One registry for every plugin kind: a decorator, one entry-point group, one factory shape.

Each plugin kind owns one ``Registry`` and one entry-point group:

* memory backend: ``memory.registry.MEMORY_BACKENDS``, ``dmt_proxy.memory_backends``;
* upstream client: ``upstream.clients.UPSTREAM_CLIENTS``, ``dmt_proxy.upstream_clients``;
* DIB domain: ``dmt_bench.dib.domains.base.DIB_DOMAINS``, ``dmt_proxy.dib_domains``;
* auditor: ``audit.registry.AUDITORS``, ``dmt_proxy.auditors``.

A plugin is one class in one module, registered under a name by the kind's
decorator (``@register_backend("mem0")``, ``@register_client("litellm")``,
``@bias_domain("age")``, ``@register_auditor("llm")``, each a thin wrapper over
``Registry.register``), and declared under the kind's entry-point group.

One factory shape for every kind: ``Plugin.from_config(config)``, a classmethod
taking the kind's one config object (``BackendConfig``, ``Settings``,
``DomainConfig``, ``AuditorConfig``) and returning the plugin ready for use
(``Registry.create``). A memory backend's ``from_config`` is a coroutine: opening
a store does I/O.

A plugin also says how the contract tests build it: ``contract_config`` (a
classmethod returning the config the kind's contract test builds it from; its
arguments, if any, are the test resources the kind offers, see each registry).
The contract tests (``tests/integration/test_memory_contract.py``,
``test_upstream_contract.py``, ``test_dib_domain_contract.py``,
``test_auditor_contract.py``) run over every name ``names()`` lists, built-in or
installed, with that configuration; an installed plugin that declares none is
skipped with the reason, a built-in that declares none fails (``test_plugins.py``).

Built-ins and outside packages register the same way: through entry points. An
outside package decorates its class in its own module and declares the module in
its ``pyproject.toml``::

    [project.entry-points."dmt_proxy.memory_backends"]
    redis = "my_package.redis_backend"

``names()`` then lists ``redis``, and ``get("redis")`` imports
``my_package.redis_backend``, whose ``@register_backend("redis")`` registers the
class. (An entry point written ``module:attr`` works too: only the module part is
imported.) Nothing is imported until a name is asked for, so naming a backend
never imports mem0 (and torch) until that backend is opened.

dmt-proxy's own plugins are declared the same way, in this repository's
``pyproject.toml``, which is the one list of them (adding a built-in is its
module plus one line there). Entry points live in installed metadata, which a
source tree on ``PYTHONPATH`` does not have and an editable install only
refreshes on reinstall, so the built-ins are read from the declaration itself
where it exists: the ``pyproject.toml`` beside the imported ``dmt_proxy`` package
(a source checkout, editable or not). An installed wheel has no such file; there
they come from the installed distribution's entry points, which are the same
declaration. Entry points that the ``dmt-proxy`` distribution itself declares are
never read as outside plugins, so a stale editable install cannot add or hide one.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable, Mapping
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

from dmt_proxy.errors import ConfigError

T = TypeVar("T")
_C = TypeVar("_C")

DISTRIBUTION = "dmt-proxy"
"""The distribution whose entry points are the built-ins."""


def _module_of(value: str) -> str:
    """``pkg.module`` of an entry point's value (``pkg.module`` or ``pkg.module:attr``)."""
    return value.split(":", 1)[0].strip()


@cache
def _source_declaration() -> dict[str, dict[str, str]] | None:
    """Group -> name -> module from the ``pyproject.toml`` beside the package; ``None`` if none."""
    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {})
    if project.get("name") != DISTRIBUTION:
        return None  # some other project's file (the package installed inside it)
    groups = project.get("entry-points", {})
    return {g: {n: _module_of(v) for n, v in eps.items()} for g, eps in groups.items()}


def declared_builtins(group: str) -> dict[str, str]:
    """dmt-proxy's own plugins of ``group``, name -> module, from their one declaration."""
    source = _source_declaration()
    if source is not None:
        return dict(source.get(group, {}))
    return {
        ep.name: _module_of(ep.value)
        for ep in entry_points(group=group)
        if ep.dist is not None and ep.dist.name == DISTRIBUTION
    }


def outside_plugins(group: str) -> dict[str, str]:
    """Plugins of ``group`` that other installed distributions declare, name -> module."""
    return {
        ep.name: _module_of(ep.value)
        for ep in entry_points(group=group)
        if ep.dist is None or ep.dist.name != DISTRIBUTION
    }


class Registry(Generic[T]):
    """Name -> plugin for one plugin kind (``T`` is what ``get`` returns, usually a class)."""

    def __init__(
        self,
        kind: str,
        *,
        group: str,
        builtins: Mapping[str, str] | None = None,
        install_hints: Mapping[str, str] | None = None,
        check: Callable[[str, Any], None] | None = None,
    ) -> None:
        """``kind`` names the plugins in messages (``"memory backend"``).

        ``group`` is the entry-point group; ``builtins`` maps each built-in name to its
        module (default: the group's declaration, ``declared_builtins``; tests pass
        their own); ``install_hints`` maps a name to the pip command that installs what
        its module imports; ``check(name, obj)`` raises when ``obj`` is not a valid
        plugin of this kind (run at registration).
        """
        self.kind = kind
        self.group = group
        self._builtins = dict(builtins) if builtins is not None else declared_builtins(group)
        self._hints = dict(install_hints or {})
        self._check = check
        self._registered: dict[str, T] = {}

    def register(self, name: str) -> Callable[[_C], _C]:
        """Class decorator: register the class under ``name`` and set its ``name`` to it."""

        def decorate(obj: _C) -> _C:
            existing = self._registered.get(name)
            if existing is not None and existing is not obj:
                raise ValueError(f"{self.kind} '{name}' is already registered by {existing!r}")
            # Named first: the check may look at the plugin as it will be used.
            setattr(obj, "name", name)  # noqa: B010 - typed as _C, which has no declared name
            if self._check is not None:
                self._check(name, obj)
            self._registered[name] = cast(T, obj)
            return obj

        return decorate

    def _plugin_modules(self) -> dict[str, str]:
        """Outside entry-point name -> module, read from the installed distributions now."""
        return outside_plugins(self.group)

    def names(self) -> list[str]:
        """Every name ``get`` accepts (built-ins, entry points, registered), sorted; imports nothing."""
        return sorted({*self._builtins, *self._plugin_modules(), *self._registered})

    def is_builtin(self, name: str) -> bool:
        """Whether ``name`` is one of dmt-proxy's own plugins (declared by this project)."""
        return name in self._builtins

    def module_of(self, name: str) -> str | None:
        """The module that registers ``name`` (``None`` for a class registered directly)."""
        return self._builtins.get(name) or self._plugin_modules().get(name)

    def get(self, name: str) -> T:
        """The plugin registered as ``name``, importing its module if needed.

        ConfigError for an unknown name (naming the known ones), a module that
        cannot be imported (naming what to install) or one that did not register
        ``name``.
        """
        found = self._registered.get(name)
        if found is not None:
            return found
        module = self.module_of(name)
        if module is None:
            raise ConfigError(
                f"unknown {self.kind} '{name}'; known {self.kind}s: {', '.join(self.names())}"
            )
        try:
            importlib.import_module(module)
        except ImportError as exc:
            hint = self._hints.get(name)
            advice = f"; install them: {hint}" if hint else ""
            raise ConfigError(
                f"{self.kind} '{name}' needs packages that are not installed ({exc}){advice}"
            ) from exc
        found = self._registered.get(name)
        if found is None:
            raise ConfigError(f"module {module} did not register {self.kind} '{name}'")
        return found

    def create(self, name: str, config: Any) -> Any:
        """``from_config(config)`` of the plugin ``name``: the one way every kind is built."""
        return cast(Any, self.get(name)).from_config(config)

    def contract_config(self, name: str, *resources: Any) -> Any:
        """The config plugin ``name`` declares for its contract test, built from ``resources``.

        Raises ``LookupError`` (with the reason a test shows when it skips) when the
        plugin declares none.
        """
        declare = getattr(self.get(name), "contract_config", None)
        if not callable(declare):
            origin = self.module_of(name) or "a direct registration"
            raise LookupError(
                f"{self.kind} '{name}' (from {origin}) declares no contract_config, "
                "so the contract tests cannot build it; add the classmethod to run them"
            )
        return declare(*resources)

    def load_all(self) -> dict[str, T]:
        """Import every known plugin and return name -> plugin (for listings and tests)."""
        return {name: self.get(name) for name in self.names()}
