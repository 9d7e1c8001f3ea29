"""Unit tests run in-process: a unit test that starts a process or binds a server socket fails.

Tests that need real processes, servers or a real PostgreSQL belong in
``tests/integration``, ``tests/reliability`` or ``tests/e2e``. The guard is an audit hook
(``sys.addaudithook``): it sees every ``subprocess.Popen``, ``os.posix_spawn``, ``os.exec``,
``os.fork`` and ``os.system``, whoever calls them (asyncio subprocesses and
``multiprocessing`` included), and every ``bind`` of an IPv4/IPv6 socket. Audit hooks
cannot be removed, so the hook is installed once and checks a flag that is set only
while a test of this folder is being set up, run or torn down.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Generator
from typing import Any

import pytest

_PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.exec", "os.fork", "os.forkpty", "os.system"}
)


class OutOfProcessError(RuntimeError):
    """A unit test started a process or bound a server socket."""


class _Guard:
    """What the audit hook checks: whether a unit test is running, and what it tried."""

    def __init__(self) -> None:
        self.active = False
        self.violations: list[str] = []

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event in _PROCESS_EVENTS:
            if event == "subprocess.Popen" and args[1] == ["uname", "-p"]:
                return  # platform.processor(), asked once by libraries while importing
            self._refuse(f"{event} {args[:2]!r}"[:300])  # not the environment
        elif event == "socket.bind" and args[0].family in (socket.AF_INET, socket.AF_INET6):
            self._refuse(f"socket.bind {args[1]!r}")

    def _refuse(self, what: str) -> None:
        self.violations.append(what)
        raise OutOfProcessError(
            f"a unit test may not start processes or bind sockets ({what}); "
            "move it to tests/integration, tests/reliability or tests/e2e"
        )


_GUARD = _Guard()
sys.addaudithook(_GUARD.audit)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    # After the session's last test, pytest also tears down the session's fixtures, and
    # those belong to the other folders (a PostgreSQL server or a model server they
    # started, stopped by a process of its own): that teardown is not the unit test's.
    return (yield from _guarded(active=nextitem is not None))


def _guarded(*, active: bool = True) -> Generator[None, object, object]:
    _GUARD.active = active
    try:
        return (yield)
    finally:
        _GUARD.active = False


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    # A test that swallowed the OutOfProcessError still fails.
    report = yield
    if _GUARD.violations and report.passed:
        report.outcome = "failed"
        report.longrepr = "out-of-process action in a unit test: " + "; ".join(_GUARD.violations)
    _GUARD.violations.clear()
    return report
