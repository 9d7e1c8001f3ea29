"""One process at a time per run directory.

A run stopped with ``kill`` still spends a few seconds stopping its proxy and writing
its manifest (status, time so far). A resume started in those seconds would read the
manifest before that write and then overwrite it, losing the stopped sitting's time,
and both processes would append to the same records for a moment. So a process holds
an exclusive ``flock`` on ``<run>/.run.lock`` while it runs a directory (the kernel
drops it when the process dies, however it dies), and a second process waits for it.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from dmt_proxy.errors import ConfigError

LOCK_NAME = ".run.lock"

_held: dict[Path, int] = {}  # run directory -> descriptor holding its lock, in this process


def acquire(out: Path, wait_s: float = 120.0, poll_s: float = 0.2) -> None:
    """Hold ``out``'s lock; wait up to ``wait_s`` for another process to release it.

    Idempotent within one process (a run resumed in the same process holds it already).
    ConfigError when the other process still holds it after ``wait_s``.
    """
    key = out.resolve()
    if key in _held:
        return
    fd = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    deadline = time.monotonic() + wait_s
    noted = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                raise ConfigError(
                    f"another dmt-bench process is running {out} (it holds {LOCK_NAME}); "
                    "stop it, or wait until it has stopped, then resume"
                ) from None
            if not noted:
                print(f"waiting for the previous process on {out} to stop ...", file=sys.stderr)
                noted = True
            time.sleep(poll_s)
    _held[key] = fd


def release(out: Path) -> None:
    """Let another process run ``out`` (a no-op when this process does not hold it)."""
    fd = _held.pop(out.resolve(), None)
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
