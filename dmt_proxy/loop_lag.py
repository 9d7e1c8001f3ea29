"""Event-loop lag: how late the loop runs a timer, the symptom of blocking work on it.

A proxy serves every request and drains its outbox on one asyncio loop. Work that holds
the loop (a pure-Python pass over a 3.5 MB memory once took ~10 s) delays every other
request by as much; this watcher measures that delay continuously, so a regression
shows in ``dmt_event_loop_lag_seconds`` and in the reliability suite's latency guard
rather than as a mysteriously slow client.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Protocol

TICK_S = 0.05
"""Timer period: a lag shorter than a tick's own jitter (~1 ms) is not worth a sample."""


class Observer(Protocol):
    """What a lag sample goes to (a Prometheus histogram's ``observe``)."""

    def observe(self, amount: float) -> None: ...


async def watch_loop_lag(observer: Observer, tick_s: float = TICK_S) -> None:
    """Sleep ``tick_s`` forever and observe how much later than asked each wake-up came."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(tick_s)
        observer.observe(max(0.0, loop.time() - started - tick_s))


SWITCH_INTERVAL_S = 0.001
"""How often a thread holding the interpreter must let another run (CPython's default is
5 ms). The audit's CPU-bound steps run in worker threads; each time the event loop comes
back from I/O it waits for the interpreter up to one interval, several times per request.
In ad-hoc profiling runs (a continuous stream of 0.1-3.5 MB memories being audited, as in
``benchmarks/perf/loop_stall.py``; not committed): chat p99 ~230-320 ms at 5 ms, ~115-145
ms at 1 ms."""


def favour_the_event_loop() -> None:
    """Set the interpreter's switch interval for a server process (``serve``, ``worker``):
    a process setting, so the CLI sets it, not ``create_app``."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)
