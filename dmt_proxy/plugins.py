"""One registry for every plugin kind: a decorator, an entry-point group and lazy built-ins.

Each plugin kind (memory backend, upstream client, DIB domain, auditor) owns one
``Registry``, with its own entry-point group:

* memory backend: ``memory.registry.MEMORY_BACKENDS``, ``dmt_proxy.memory_backends``;
* upstream client: ``upstream.clients.UPSTREAM_CLIENTS``, ``dmt_proxy.upstream_clients``;
* DIB domain: ``bench.dib.domains.base.DIB_DOMAINS``, ``dmt_proxy.dib_domains``;
* auditor: ``audit.registry.AUDITORS``, ``dmt_proxy.auditors``.

A plugin is a class in a module, registered under a name by the kind's decorator
(``@register_backend("mem0")``, ``@register_client("litellm")``, ``@bias_domain("age")``,
``@register_auditor("llm")``, each a thin wrapper over ``Registry.register``). Nothing
is imported until a name is asked for: built-ins are listed in a name -> module map,
and ``get(name)`` imports the module, whose decorator then registers the class. So
naming a backend never imports mem0 (and torch) until that backend is opened.

An outside package registers the same way. It decorates its class in its own
module and declares that module under the kind's entry-point group, in its
``pyproject.toml``::

    [project.entry-points."dmt_proxy.memory_backends"]
    redis = "my_package.redis_backend"

``names()`` then lists ``redis``, and ``get("redis")`` imports
``my_package.redis_backend``; its ``@register_backend("redis")`` registers the
class. (An entry point written ``module:attr`` works too: only the module part is
imported.) Built-ins are not declared as entry points: each registry is built
with their module map.

Registered plugins are tested the moment they exist: the contract tests
(``tests/unit/test_memory_contract.py``, ``test_upstream_contract.py``,
``test_dib_domain_contract.py``, ``test_auditor_contract.py``) are parametrised over ``names()``, and a name
without a test fixture fails there.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar, cast

from dmt_proxy.errors import ConfigError

T = TypeVar("T")
_C = TypeVar("_C")


class Registry(Generic[T]):
    """Name -> plugin for one plugin kind (``T`` is what ``get`` returns, usually a class)."""

    def __init__(
        self,
        kind: str,
        *,
        group: str,
        builtins: Mapping[str, str],
        install_hints: Mapping[str, str] | None = None,
        check: Callable[[str, Any], None] | None = None,
    ) -> None:
        """``kind`` names the plugins in messages (``"memory backend"``).

        ``group`` is the entry-point group outside packages use; ``builtins`` maps
        each built-in name to its module; ``install_hints`` maps a name to the pip
        command that installs what its module imports; ``check(name, obj)`` raises
        when ``obj`` is not a valid plugin of this kind (run at registration).
        """
        self.kind = kind
        self.group = group
        self._builtins = dict(builtins)
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
        """Entry-point name -> module, read from the installed distributions now."""
        return {ep.name: ep.module for ep in entry_points(group=self.group)}

    def names(self) -> list[str]:
        """Every name ``get`` accepts (built-ins, entry points, registered), sorted; imports nothing."""
        return sorted({*self._builtins, *self._plugin_modules(), *self._registered})

    def get(self, name: str) -> T:
        """The plugin registered as ``name``, importing its module if needed.

        ConfigError for an unknown name (naming the known ones), a module that
        cannot be imported (naming what to install) or one that did not register
        ``name``.
        """
        found = self._registered.get(name)
        if found is not None:
            return found
        module = self._builtins.get(name) or self._plugin_modules().get(name)
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

    def load_all(self) -> dict[str, T]:
        """Import every known plugin and return name -> plugin (for listings and tests)."""
        return {name: self.get(name) for name in self.names()}
