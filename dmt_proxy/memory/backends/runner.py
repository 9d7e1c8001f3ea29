"""One way for a store with a blocking API to be called from async code.

mem0's client, the paging SQLite file and the langgraph store are synchronous and
not safe to share between threads: every call runs in a worker thread under one
lock, refuses to run after ``close``, and turns the store's own failures into
``MemoryStoreError`` (which the proxy answers without memory and the outbox
retries).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import TypeVar

from dmt_proxy.memory.base import MemoryStoreError, StoreClosed

T = TypeVar("T")


class StoreRunner:
    """A lock, a closed flag and a worker thread for one store (``name`` is for messages)."""

    def __init__(self, name: str, errors: tuple[type[Exception], ...] = ()) -> None:
        self.name = name
        self._errors = errors
        # Re-entrant: a store call that reaches back into the same store must not deadlock.
        self._lock = threading.RLock()
        self._closed = False

    @property
    def closed(self) -> bool:
        """Whether ``shut``/``close`` has run."""
        return self._closed

    def check_open(self) -> None:
        """Raise ``StoreClosed`` once the store is closed."""
        if self._closed:
            raise StoreClosed(f"{self.name} store is closed")

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` in this thread, under the lock, on an open store."""
        with self._lock:
            self.check_open()
            try:
                return fn()
            except self._errors as exc:
                raise MemoryStoreError(f"{self.name} store failed: {exc}") from exc

    async def run(self, fn: Callable[[], T]) -> T:
        """``call(fn)`` in a worker thread."""
        return await asyncio.to_thread(self.call, fn)

    def shut(self, release: Callable[[], None]) -> None:
        """Mark the store closed and ``release`` its files, once (later calls do nothing)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            release()

    async def close(self, release: Callable[[], None]) -> None:
        """``shut(release)`` in a worker thread."""
        await asyncio.to_thread(self.shut, release)
