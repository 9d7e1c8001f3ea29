"""Every exception class defined in ``dmt_proxy`` or ``dmt_bench`` is drawn in ``errors.py``'s
tree, where it is.

The classes are found by reading the source with ``ast`` (a class whose base is an
exception, transitively), then imported only from the modules that define one, so
listing them does not import mem0 or torch. A new exception class fails here until
it subclasses a class of the tree and is drawn under its parent, named with its
module when it lives outside ``errors.py``; a class that moves fails here until the
tree names its new module.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import re
from pathlib import Path

import pytest

from dmt_proxy import errors
from dmt_proxy.errors import DmtError, RunInterrupted, UpstreamError

PACKAGE = Path(errors.__file__).resolve().parent
RESEARCH = PACKAGE.parent / "dmt_bench"
"""The research harness raises its own subclasses of the tree's classes (drawn with their
full module name, ``dmt_bench.…``)."""

OUTSIDE_DMT_ERROR = {"Terminated": KeyboardInterrupt}
"""Classes drawn under a Python exception instead of ``DmtError``, and that exception."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _exception_classes() -> dict[str, type[BaseException]]:
    """Name -> class of every exception class defined in the package (found with ``ast``)."""
    defined: list[tuple[str, str, list[str]]] = []
    for path in sorted([*PACKAGE.rglob("*.py"), *RESEARCH.rglob("*.py")]):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [b for b in map(_base_name, node.bases) if b]
                defined.append((_module_name(path), node.name, bases))
    known = {n for n in dir(builtins) if isinstance(getattr(builtins, n), type)
             and issubclass(getattr(builtins, n), BaseException)}  # fmt: skip
    while True:  # the closure over base names; the import below confirms each candidate
        grown = known | {name for _, name, bases in defined if set(bases) & known}
        if grown == known:
            break
        known = grown
    found: dict[str, type[BaseException]] = {}
    for module, name, bases in defined:
        if not set(bases) & known:
            continue
        cls = getattr(importlib.import_module(module), name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            assert name not in found, f"two exception classes are named {name}"
            found[name] = cls
    return found


def _drawn_tree() -> dict[str, str]:
    """Name -> drawn parent, read from the tree in ``errors``' docstring."""
    doc = errors.__doc__ or ""
    lines = doc.split("::", 1)[1].splitlines()[1:]
    parents: dict[str, str] = {}
    stack: list[tuple[int, str]] = []  # (column of the name, name) of the open branches
    for line in lines:
        if line.strip() and not line.startswith("    "):
            break  # the indented block has ended
        match = re.match(r"^[\s│]*(?:[├└]── )?([A-Z]\w+)", line)
        if not match:
            continue
        column, name = match.start(1), match.group(1)
        while stack and stack[-1][0] >= column:
            stack.pop()
        parents[name] = stack[-1][1] if stack else ""
        stack.append((column, name))
    return parents


MODULE_NOTE = re.compile(r"\(([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)\)\s*$")
"""A drawn class's module, ``(memory.base)``, at the end of its line or of a line
continuing its description."""


def _drawn_modules() -> dict[str, str]:
    """Name -> the module drawn beside it (relative to ``dmt_proxy``), for those drawn with one."""
    doc = errors.__doc__ or ""
    lines = doc.split("::", 1)[1].splitlines()[1:]
    modules: dict[str, str] = {}
    current: str | None = None  # the class whose description the line continues
    for line in lines:
        if line.strip() and not line.startswith("    "):
            break
        name = re.match(r"^[\s│]*(?:[├└]── )?([A-Z]\w+)", line)
        if name:
            current = name.group(1)
        note = MODULE_NOTE.search(line)
        if note and current is not None:
            assert current not in modules, f"{current} is drawn with two modules"
            modules[current] = note.group(1)
    return modules


CLASSES = _exception_classes()
TREE = _drawn_tree()
MODULES = _drawn_modules()


def test_the_walk_finds_the_known_classes() -> None:
    assert {"DmtError", "UpstreamError", "RunStopped", "DoseStopped", "VerdictInvalid",
            "RecordConflict", "ConsolidationError", "Terminated"} <= set(CLASSES)  # fmt: skip


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_exception_class_is_in_the_drawn_tree(name: str) -> None:
    cls = CLASSES[name]
    assert name in TREE, f"{cls.__module__}.{name} is not drawn in dmt_proxy/errors.py"
    root = OUTSIDE_DMT_ERROR.get(name, DmtError)
    assert issubclass(cls, root), f"{name} must subclass {root.__name__}"
    parent = TREE[name]
    if parent:
        expected = CLASSES.get(parent) or getattr(builtins, parent)
        assert issubclass(cls, expected), f"{name} is drawn under {parent} but is not one"


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_every_drawn_module_is_where_the_class_is_defined(name: str) -> None:
    """A class outside ``errors.py`` is drawn with its real module; one inside, with none."""
    where = CLASSES[name].__module__
    if where == errors.__name__:
        assert name not in MODULES, f"{name} is defined in dmt_proxy.errors, not {MODULES[name]}"
    else:
        assert MODULES.get(name) == where.removeprefix("dmt_proxy."), (
            f"{name} is defined in {where}; the tree names {MODULES.get(name)}"
        )


def test_the_module_notes_are_read() -> None:
    """The parser finds notes at a line's end and on a continuation line."""
    assert MODULES["Terminated"] == "cli.framework"
    assert MODULES["CircuitOpenError"] == "memory.circuit"
    assert MODULES["RecordConflict"] == "memory.base"
    assert set(MODULES) <= set(CLASSES)


def test_the_drawn_tree_names_only_real_classes() -> None:
    for name in TREE:
        assert name in CLASSES or isinstance(getattr(builtins, name, None), type), name


def test_benchmark_stops_are_not_upstream_errors() -> None:
    for name in ("RunStopped", "DoseStopped"):
        assert issubclass(CLASSES[name], RunInterrupted)
        assert not issubclass(CLASSES[name], UpstreamError)


@pytest.mark.parametrize("name", ["VerdictInvalid", "NoLogprobs", "RecordConflict"])
def test_former_value_errors_are_still_value_errors(name: str) -> None:
    assert issubclass(CLASSES[name], ValueError)


def test_a_closed_storage_is_still_a_runtime_error() -> None:
    """A closed outbox raised a bare ``RuntimeError`` before it had a class of the tree."""
    assert issubclass(CLASSES["StorageClosed"], RuntimeError)
