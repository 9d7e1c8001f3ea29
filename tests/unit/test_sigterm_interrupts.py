"""SIGTERM during a benchmark: raised as an interrupt, so an async run unwinds like Ctrl-C."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from dmt_proxy.cli.framework import Terminated, sigterm_interrupts


def test_sigterm_cancels_the_running_coroutine_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    events: list[str] = []

    async def run() -> None:
        asyncio.get_running_loop().call_later(0.1, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            events.append("recorded as stopped")  # what the runners do on cancellation
            raise
        finally:
            events.append("proxy stopped")

    with pytest.raises(Terminated), sigterm_interrupts():
        asyncio.run(run())
    assert events == ["recorded as stopped", "proxy stopped"]
    assert signal.getsignal(signal.SIGTERM) is before
