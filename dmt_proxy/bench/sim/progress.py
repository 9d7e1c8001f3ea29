"""Progress bars on stderr (rich), with elapsed time and ETA for each long step."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any


class Bars:
    """A rich ``Progress`` on stderr; ``enabled=False`` makes every call a no-op."""

    def __init__(self, enabled: bool = True) -> None:
        self._progress: Any = None
        if enabled:
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
                console=Console(file=sys.stderr),
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
        if self._progress is None:
            return -1
        return int(self._progress.add_task(description, total=total, completed=completed))

    def advance(self, task: int, n: int = 1) -> None:
        if self._progress is not None and task >= 0:
            self._progress.advance(task, n)

    def note(self, message: str) -> None:
        """A line above the bars (or plain stderr when disabled)."""
        if self._progress is not None:
            self._progress.console.print(message, markup=False, highlight=False)
        else:
            print(message, file=sys.stderr, flush=True)
