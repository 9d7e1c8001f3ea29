"""Fixtures of the reliability suite, and a terminal section listing what it measured."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.reliability.harness import FakeUpstream

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
