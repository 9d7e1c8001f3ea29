"""``docs/ARCHITECTURE.md`` against the code: paths, plugin registries and the import rules.

The import rules are read from the source with ``ast`` (nothing is imported to
check them): only ``dmt_proxy/api/`` imports FastAPI or Starlette, the plain types
import only plain types, no service imports the pipeline, the API or the CLI, the
upstream seam imports no other service, ``audit/`` imports nothing of the memory side
and the memory side only the audit's seam, and the imports have no cycle. Every
import counts, wherever it stands: at module level, inside a function or under
``TYPE_CHECKING`` (a deferred import still ties the two modules together).
One rule is also checked by running it, in a fresh interpreter
(``tests/integration/test_fresh_imports.py``): each plain type, imported alone, loads
only plain types (package ``__init__`` files included). Where the
code still bends, the exception is listed here with its reason and in the page's
"Where the code still bends"; an exception that no longer applies fails, so the list
only shrinks.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from dmt_proxy.plugins import Registry

ROOT = Path(__file__).resolve().parents[2]
DOC_PATH = ROOT / "docs" / "ARCHITECTURE.md"
PACKAGE = ROOT / "dmt_proxy"
RESEARCH = ROOT / "dmt_bench"
"""The research harness: a package of its own above the product, which imports only the
product's public modules and is imported by nothing in it."""
PACKAGES = ("dmt_proxy", "dmt_bench")

PENDING_DIR = "dmt_proxy/testing/"
"""Named by the page as the home of the shipped fakes; tolerated as missing until the
package exists, checked like any other path from then on."""

PLAIN_TYPES = frozenset({
    "dmt_proxy", "dmt_proxy.domains", "dmt_proxy.tags", "dmt_proxy.errors",
    "dmt_proxy.openai_types", "dmt_proxy.policy", "dmt_proxy.settings",
    "dmt_proxy.resources", "dmt_proxy.memory.base", "dmt_proxy.turns", "dmt_proxy.exchange",
    "dmt_proxy.modes", "dmt_proxy.audit_types", "dmt_proxy.provenance",
})  # fmt: skip
SERVICE_PACKAGES = ("dmt_proxy.memory", "dmt_proxy.audit", "dmt_proxy.upstream")
SHARED_SERVICE_MODULES = frozenset(
    {"dmt_proxy.metrics", "dmt_proxy.embedder", "dmt_proxy.minilm", "dmt_proxy.plugins"}
)
WEB_FRAMEWORKS = ("fastapi", "starlette")
AUDIT_SEAM = frozenset(
    {
        "dmt_proxy.audit.protocol",
        "dmt_proxy.audit.schema",
        "dmt_proxy.audit.vote",
        "dmt_proxy.audit.decision",
        "dmt_proxy.audit.grounding",
    }
)
"""What of ``audit/`` the memory side may import: the ``Auditor`` protocol, the verdict
types (with the judges' domain vote they use), the policy decision on a verdict and the
grounding of its tag in the text (pure functions of plain types)."""
AUDIT_COMPOSITION = frozenset({("dmt_proxy.memory.assembly", "dmt_proxy.audit.stages")})
"""The one place the memory side builds the audit pipeline (named on the page)."""

FRAMEWORK_EXCEPTIONS: dict[str, str] = {}
UPWARD_EXCEPTIONS: dict[tuple[str, str], str] = {}


def doc() -> str:
    return DOC_PATH.read_text(encoding="utf-8")


# -- the source, read with ast --------------------------------------------------


@dataclass(frozen=True)
class Import:
    target: str
    """The imported module (``from a.b import c`` is ``a.b.c`` when that is a module)."""


@cache
def modules() -> dict[str, Path]:
    """Every module of the product and the research harness by dotted name (a package by
    its ``__init__``)."""
    found = {}
    for path in sorted([*PACKAGE.rglob("*.py"), *RESEARCH.rglob("*.py")]):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node: ast.Import | ast.ImportFrom, module: str) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: resolved against the importing module's package
        package = module.split(".")
        if modules()[module].name != "__init__.py":
            package.pop()
        package = package[: len(package) - node.level + 1]
        base = ".".join([*package, *([node.module] if node.module else [])])
    found = []
    for alias in node.names:
        full = f"{base}.{alias.name}"
        found.append(full if full in modules() else base)
    return found


def imports_in(source: str, module: str) -> tuple[Import, ...]:
    """Every import of ``source`` read as ``module``'s: at module level, inside a
    function or class, or under ``TYPE_CHECKING``."""
    return tuple(
        Import(target)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for target in _targets(node, module)
    )


@cache
def imports(module: str) -> tuple[Import, ...]:
    """Everything ``module`` imports, wherever the import stands."""
    return imports_in(modules()[module].read_text(encoding="utf-8"), module)


def within(name: str, *packages: str) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def is_service(module: str) -> bool:
    return within(module, *SERVICE_PACKAGES) or module in SHARED_SERVICE_MODULES


# -- paths and names on the page -------------------------------------------------

_PATH = re.compile(
    r"(?<![\w./-])((?:dmt_proxy|dmt_bench|tests|docs|policies|auditor_prompts)/[\w./-]*[\w/])"
)
_DOTTED = re.compile(r"(?<![\w./-])((?:dmt_proxy|dmt_bench)(?:\.\w+)+)")


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:
        return False


@cache
def registries() -> dict[str, tuple[str, Registry[object]]]:
    """Every registry the package defines at module level: variable -> (module, registry)."""
    found: dict[str, tuple[str, Registry[object]]] = {}
    for module, path in modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            value: ast.expr | None
            if isinstance(node, ast.Assign):
                target, value = node.targets[0], node.value
            elif isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            else:
                continue
            if not isinstance(value, ast.Call):
                continue
            func = value.func
            called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if called != "Registry":
                continue
            assert isinstance(target, ast.Name), f"{module}: a registry bound to {target!r}"
            registry = getattr(importlib.import_module(module), target.id)
            assert isinstance(registry, Registry)
            found[target.id] = (module, registry)
    return found


def test_every_path_named_exists() -> None:
    named = set(_PATH.findall(doc()))
    assert len(named) > 30, "the path pattern no longer finds the page's paths"
    pending = not (ROOT / PENDING_DIR).is_dir()
    missing = sorted(
        path
        for path in named
        if not (ROOT / path).exists() and not (pending and path.startswith(PENDING_DIR))
    )
    assert missing == [], f"docs/ARCHITECTURE.md names paths that do not exist: {missing}"


def test_the_entry_point_groups_named_are_the_registries_groups() -> None:
    dotted = set(_DOTTED.findall(doc()))
    groups = {name for name in dotted if not _is_module(name)}
    assert groups == {registry.group for _, registry in registries().values()}


def test_every_registry_is_documented() -> None:
    found = registries()
    assert len(found) >= 4, "the registry scan no longer finds the plugin registries"
    text = doc()
    rows = [line for line in text.splitlines() if line.startswith("|")]
    for name, (module, registry) in found.items():
        path = str(modules()[module].relative_to(ROOT))
        row = next((r for r in rows if f"`{name}`" in r), None)
        assert row is not None, f"{name} ({path}) has no row in the plugin table"
        assert f"`{path}`" in row and f"`{registry.group}`" in row, row
        tests = re.findall(r"`(tests/(?:unit|integration)/test_\w+_contract\.py)`", row)
        assert tests and (ROOT / tests[0]).is_file(), f"{name}: no contract test in {row}"


# -- the import rules --------------------------------------------------------------


def test_only_the_api_imports_a_web_framework() -> None:
    offenders = {
        module
        for module in modules()
        if not within(module, "dmt_proxy.api", "dmt_proxy.testing")
        and any(within(i.target, *WEB_FRAMEWORKS) for i in imports(module))
    }
    assert offenders - set(FRAMEWORK_EXCEPTIONS) == set()
    stale = {m for m in FRAMEWORK_EXCEPTIONS if m in modules() and m not in offenders}
    assert stale == set(), "these no longer import a web framework: drop the exception"


def test_plain_types_import_only_plain_types() -> None:
    problems = [
        f"{module} imports {i.target}"
        for module in sorted(PLAIN_TYPES)
        for i in imports(module)
        if within(i.target, "dmt_proxy") and i.target not in PLAIN_TYPES
    ]
    assert problems == []


def is_plain_package(module: str) -> bool:
    """A package whose ``__init__`` imports nothing but plain types (it runs first)."""
    return modules()[module].name == "__init__.py" and all(
        i.target in PLAIN_TYPES for i in imports(module) if within(i.target, "dmt_proxy")
    )


def _upward(module: str) -> set[str]:
    """The pipeline, API or CLI modules that service ``module`` imports, by layer."""
    layers = ("dmt_proxy.pipeline", "dmt_proxy.api", "dmt_proxy.cli")
    return {
        layer for i in imports(module) for layer in layers if within(i.target, layer)
    }  # fmt: skip


def test_no_service_imports_the_pipeline_the_api_or_the_cli() -> None:
    edges = {(m, layer) for m in modules() if is_service(m) for layer in _upward(m)}
    assert edges - set(UPWARD_EXCEPTIONS) == set()
    stale = {e for e in UPWARD_EXCEPTIONS if e[0] in modules() and e not in edges}
    assert stale == set(), "these imports are gone: drop the exception"


def test_upstream_imports_no_other_service() -> None:
    # The embedder is a leaf (numpy only): upstream serves it as the local embedding model.
    allowed = PLAIN_TYPES | {"dmt_proxy.plugins", "dmt_proxy.embedder"}
    problems = [
        f"{module} imports {i.target}"
        for module in modules()
        if within(module, "dmt_proxy.upstream")
        for i in imports(module)
        if within(i.target, "dmt_proxy")
        and not within(i.target, "dmt_proxy.upstream")
        and i.target not in allowed
    ]
    assert problems == []


def test_nothing_in_audit_or_the_memory_package_imports_the_memory_service() -> None:
    importers = {
        module
        for module in modules()
        if within(module, "dmt_proxy.audit") or module == "dmt_proxy.memory"
        if any(i.target == "dmt_proxy.memory.service" for i in imports(module))
    }
    assert importers == set()


def test_audit_imports_nothing_of_the_memory_side_beyond_plain_types() -> None:
    # audit/ only judges: the write path, rendering and the service are memory's.
    problems = [
        f"{module} imports {i.target}"
        for module in modules()
        if within(module, "dmt_proxy.audit")
        for i in imports(module)
        if within(i.target, "dmt_proxy.memory") and i.target not in PLAIN_TYPES
    ]
    assert problems == []


def test_memory_sees_the_audit_only_through_its_seam() -> None:
    problems = [
        f"{module} imports {i.target}"
        for module in modules()
        if within(module, "dmt_proxy.memory")
        for i in imports(module)
        if within(i.target, "dmt_proxy.audit")
        and i.target not in AUDIT_SEAM
        and (module, i.target) not in AUDIT_COMPOSITION
    ]
    assert problems == []
    assert all(
        any(i.target == target for i in imports(module)) for module, target in AUDIT_COMPOSITION
    ), "the composition no longer builds the audit pipeline: drop it from AUDIT_COMPOSITION"


def test_the_exceptions_are_on_the_page() -> None:
    text = doc()
    for module in {*FRAMEWORK_EXCEPTIONS, *(m for m, _ in UPWARD_EXCEPTIONS)}:
        if module in modules():
            assert f"`{modules()[module].relative_to(ROOT)}`" in text, module


def _parents(name: str) -> set[str]:
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


@cache
def import_graph() -> dict[str, frozenset[str]]:
    """Each module -> the package's modules it imports, every import counted.

    Importing a.b.c runs the packages a and a.b first, so they are edges too; a module's
    own packages are already being imported, so they are not.
    """
    return {
        module: frozenset(
            p
            for i in imports(module)
            if within(i.target, *PACKAGES)
            for p in _parents(i.target)
            if p in modules() and p not in _parents(module)
        )
        for module in modules()
    }


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The cycles a depth-first walk meets, each as ``[a, b, ..., a]`` (at least one for
    every group of modules that import each other, none when there is none)."""
    found: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            found.append([*path[path.index(module) :], module])
            return
        if module in done:
            return
        for target in sorted(graph[module]):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return found


def test_imports_inside_functions_and_under_type_checking_are_counted() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from dmt_proxy.errors import ConfigError\n"
        "def f() -> None:\n    import dmt_proxy.policy\n"
    )
    targets = {i.target for i in imports_in(source, "dmt_proxy.tags")}
    assert {"dmt_proxy.errors", "dmt_proxy.policy"} <= targets


def test_the_cycle_search_finds_a_cycle_and_only_a_cycle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset()}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({**graph, "c": frozenset({"d"})}) == []


def test_imports_have_no_cycle() -> None:
    found = [" -> ".join(cycle) for cycle in cycles(import_graph())]
    assert found == [], "import cycles (every import counts):\n" + "\n".join(found)


def test_the_product_imports_nothing_of_the_research_harness() -> None:
    importers = sorted(
        f"{module} imports {i.target}"
        for module in modules()
        if within(module, "dmt_proxy")
        for i in imports(module)
        if within(i.target, "dmt_bench")
    )
    assert importers == []


def test_the_research_harness_imports_only_public_modules_of_the_product() -> None:
    # A module or package whose name starts with "_" is the product's own business.
    private = sorted(
        f"{module} imports {i.target}"
        for module in modules()
        if within(module, "dmt_bench")
        for i in imports(module)
        if within(i.target, "dmt_proxy") and any(p.startswith("_") for p in i.target.split("."))
    )
    assert private == []
