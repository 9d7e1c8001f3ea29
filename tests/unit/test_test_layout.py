"""The tests' own layout: suites by kind, and every shared fixture defined once.

Read from the source with ``ast`` (nothing imported). ``tests/unit/conftest.py``
keeps unit tests in-process at run time; this keeps the suites from leaning on each
other: benchmarks import nothing of ``tests/``, e2e nothing of the reliability suite,
and the process helpers (``free_port``, the fake upstream launcher) have one home.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("dmt_proxy", "dmt_bench", "tests", "benchmarks")
ONE_HOME = {
    "free_port": "dmt_proxy/net.py",
    "FakeUpstream": "tests/proxy_process.py",
    "ProxyProcess": "tests/proxy_process.py",
    "WorkerProcess": "tests/proxy_process.py",
}


def _python_files(*tops: str) -> Iterator[Path]:
    for top in tops:
        yield from sorted((ROOT / top).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_no_benchmark_imports_the_tests() -> None:
    offenders = [
        _rel(path)
        for path in _python_files("benchmarks")
        if any(m == "tests" or m.startswith("tests.") for m in _imported(path))
    ]
    assert offenders == []


def test_e2e_does_not_import_the_reliability_suite() -> None:
    offenders = [
        _rel(path)
        for path in _python_files("tests/e2e")
        if any(m.startswith("tests.reliability") for m in _imported(path))
    ]
    assert offenders == []


def test_each_process_helper_is_defined_once() -> None:
    found: dict[str, list[str]] = {name: [] for name in ONE_HOME}
    for path in _python_files(*SOURCES):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in found:
                found[node.name].append(_rel(path))
    assert found == {name: [home] for name, home in ONE_HOME.items()}
