"""Progress of a simulation run when stderr is not a terminal (a run left under nohup)."""

from __future__ import annotations

import io

from dmt_bench.harness.progress import Bars


def test_redirected_progress_prints_plain_lines_with_time_left() -> None:
    out = io.StringIO()  # not a terminal, like a log file
    with Bars(stream=out, every_s=0.0) as bars:
        bar = bars.add("mem0 baseline", total=4, completed=2)
        bars.advance(bar)
        bars.advance(bar)
        bars.note("starting the mem0 proxy ...")
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("mem0 baseline: 2/4, 0:00 elapsed")
    assert "left" not in lines[0]  # nothing done by this process yet: no rate to extrapolate
    assert lines[1].startswith("mem0 baseline: 3/4,") and lines[1].endswith("left")
    assert lines[2].startswith("mem0 baseline: 4/4,") and "left" not in lines[2]
    assert lines[3] == "starting the mem0 proxy ..."


def test_redirected_progress_is_throttled_per_bar() -> None:
    out = io.StringIO()
    bars = Bars(stream=out, every_s=3600.0)
    bar = bars.add("agent turns", total=100)
    for _ in range(50):
        bars.advance(bar)
    assert len(out.getvalue().splitlines()) == 1  # the opening line only, within the hour
    bars.advance(bar, 50)
    assert out.getvalue().splitlines()[-1].startswith("agent turns: 100/100")


def test_disabled_progress_prints_notes_only() -> None:
    out = io.StringIO()
    bars = Bars(enabled=False, stream=out)
    bar = bars.add("agent turns", total=3)
    bars.advance(bar)
    bars.note("resuming")
    assert bar == -1
    assert out.getvalue() == "resuming\n"
