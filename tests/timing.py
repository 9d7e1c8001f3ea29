"""One factor for the time limits of tests that wait on real processes, sockets and clocks.

Speed is measured in benchmarks, not asserted in tests (README): a test bounds time only
as a coarse guard against a hang or a regression by orders of magnitude. Where such a
bound still depends on how fast this machine is (a start-up wait, a lease a heartbeat must
keep renewing, a delay that must outlast a timeout), it is written as ``budget(seconds)``:
the seconds an idle development machine needs with a wide margin, times
``DMT_TEST_TIME_FACTOR`` (default 1). A slow or shared machine runs the suite with, say,
``DMT_TEST_TIME_FACTOR=3`` instead of the tests growing their own margins one by one.
"""

from __future__ import annotations

import os

SLOW = float(os.environ.get("DMT_TEST_TIME_FACTOR", "1"))
"""How many times slower than an idle development machine this one is taken to be."""

if not SLOW >= 1.0:  # also refuses nan: a factor below 1 would only shrink the margins
    raise ValueError(f"DMT_TEST_TIME_FACTOR must be a number >= 1, not {SLOW}")


def budget(seconds: float) -> float:
    """``seconds`` scaled by ``DMT_TEST_TIME_FACTOR`` (the time limits that encode speed)."""
    return seconds * SLOW
