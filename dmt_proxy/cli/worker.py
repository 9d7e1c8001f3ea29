"""``dmt-proxy worker``: a process that only drains the shared outbox.

It runs what the proxy's built-in worker runs (first stage, auditor, store) against
the PostgreSQL outbox and memory store the proxies write to, and serves no HTTP.
Any number of workers, on any machines that reach the database, may run at once:
each claims rows under a lease (see ``dmt_proxy.memory.write.pg_outbox``). SIGTERM or
SIGINT stops it; rows it held are released so another worker takes them at once.
"""

from __future__ import annotations

import asyncio
import logging
import signal

from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.assembly import build_memory_service, outbox_kind, store_database
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.factory import open_upstream

log = logging.getLogger("dmt_proxy.worker")


def check_shared_outbox(settings: Settings, policy: Policy) -> None:
    """A separate worker needs the PostgreSQL outbox (the SQLite one belongs to one process)."""
    if outbox_kind(settings, store_database(settings, policy)) != "postgres":
        raise ConfigError(
            "dmt-proxy worker drains the shared PostgreSQL outbox: set DMT_OUTBOX=postgres "
            "(or a memory backend kept in PostgreSQL) and DMT_DATABASE_URL; with the SQLite "
            "outbox the proxy's built-in worker is the only one"
        )


async def run_worker(settings: Settings, *, stop: asyncio.Event | None = None) -> int:
    """Drain the outbox until ``stop`` is set (default: until SIGTERM or SIGINT)."""
    policy = settings.load_policy()
    if policy.memory.backend == "none":
        raise ConfigError("the policy turns memory off (memory.backend: none): nothing to drain")
    check_shared_outbox(settings, policy)
    if stop is None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    upstream = await open_upstream(settings, policy)
    try:
        service = await build_memory_service(
            settings.model_copy(update={"worker": True}), policy, upstream.registry,
            upstream.chat, Metrics(),
        )  # fmt: skip
        try:
            service.start()
            log.info("dmt-proxy worker draining the outbox (backend %s)", policy.memory.backend)
            await stop.wait()
        finally:
            await service.aclose()
    finally:
        await upstream.aclose()
    return 0


def main(settings: Settings) -> int:
    """Run the worker in a new event loop (the CLI entry point)."""
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")  # fmt: skip
    return asyncio.run(run_worker(settings))
