"""Progress on stderr, with elapsed time and ETA for each long step.

On a terminal these are rich bars. Redirected to a file (``nohup … > run.log``) a live
bar prints nothing useful, so each bar becomes a plain line, written at most once a
minute per bar and when it completes: a run left in the background still says how far
it is and how long is left.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TextIO


@dataclass
class _Line:
    """One bar's state in plain-line mode."""

    description: str
    total: int
    completed: int
    started: float = field(default_factory=time.monotonic)
    base: int = 0  # completed when this process started it: the rate counts this process's work
    printed: float = 0.0


class Bars:
    """Rich bars on a terminal, plain lines elsewhere; ``enabled=False`` prints only notes."""

    def __init__(
        self, enabled: bool = True, stream: TextIO | None = None, every_s: float = 60.0
    ) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self._progress: Any = None
        self._lines: dict[int, _Line] | None = None
        self._every_s = every_s
        if not enabled:
            return
        if not _is_terminal(self._stream):
            self._lines = {}
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=self._stream),
            transient=False,
        )

    def __enter__(self) -> Bars:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._progress is not None:
            self._progress.stop()

    def add(self, description: str, total: int, completed: int = 0) -> int:
        """A new bar; returns its id (-1 when disabled)."""
        if self._progress is not None:
            return int(self._progress.add_task(description, total=total, completed=completed))
        if self._lines is None:
            return -1
        task = len(self._lines)
        self._lines[task] = _Line(description, total, completed, base=completed)
        self._print(self._lines[task])
        return task

    def advance(self, task: int, n: int = 1) -> None:
        if task < 0:
            return
        if self._progress is not None:
            self._progress.advance(task, n)
        elif self._lines is not None and task in self._lines:
            line = self._lines[task]
            line.completed += n
            now = time.monotonic()
            if line.completed >= line.total or now - line.printed >= self._every_s:
                self._print(line, now)

    def note(self, message: str) -> None:
        """A line above the bars (or a plain line without them)."""
        if self._progress is not None:
            self._progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=self._stream, flush=True)

    def _print(self, line: _Line, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        line.printed = now
        elapsed = now - line.started
        text = f"{line.description}: {line.completed}/{line.total}, {_clock(elapsed)} elapsed"
        done_here = line.completed - line.base
        if done_here > 0 and line.completed < line.total:
            left = (line.total - line.completed) * elapsed / done_here
            text += f", about {_clock(left)} left"
        print(text, file=self._stream, flush=True)


def _is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _clock(seconds: float) -> str:
    """``1:02:03`` or ``2:03``: the width of the number says its magnitude."""
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"
