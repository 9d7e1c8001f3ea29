"""Fixtures of the reliability suite, and a terminal section listing what it measured."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.proxy_process import FakeUpstream, WorkerProcess

_MEASUREMENTS: list[str] = []


@pytest.fixture
def fakes() -> Iterator[Callable[..., FakeUpstream]]:
    """Start fake upstream processes (``fakes("--fail-status", "503")``); stopped afterwards."""
    started: list[FakeUpstream] = []

    def start(*args: str) -> FakeUpstream:
        fake = FakeUpstream(args=args).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``dmt-proxy worker`` processes; all are stopped at the end of the test."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str]) -> WorkerProcess:
        worker = WorkerProcess(state_dir=tmp_path / f"worker-{len(started)}", env=env)
        started.append(worker.start(*args))
        return worker

    yield start
    for worker in started:
        worker.stop()


@pytest.fixture
def report() -> Callable[[str], None]:
    """Record a measured number; all of them are printed at the end of the run."""

    def add(line: str) -> None:
        _MEASUREMENTS.append(line)
        print(line)

    return add


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _MEASUREMENTS:
        terminalreporter.section("reliability measurements")
        for line in _MEASUREMENTS:
            terminalreporter.write_line(line)
