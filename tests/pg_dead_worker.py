"""A worker process that claims PostgreSQL outbox rows and then hangs, for tests that
SIGKILL it: a real dead worker (no shutdown hook, no lease release, no heartbeat).

    python -m tests.pg_dead_worker DSN LEASE_S N claim
        claim N rows, print ``claimed <ids>``, sleep
    python -m tests.pg_dead_worker DSN LEASE_S N audit
        claim N rows and process them with the real OutboxWorker and postgres backend:
        each record is stored (``pending``), then its audit waits on an auditor that
        never answers; print ``auditing <ids>`` once every audit is under way, sleep

The auditor is the shipped ScriptedAuditor with a delay longer than any test (a fake:
what matters is where the worker is when it dies).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.memory.write.pg_outbox import PostgresOutbox
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import parse_policy
from dmt_proxy.testing.auditor import ScriptedAuditor


async def main(dsn: str, lease_s: float, n: int, mode: str) -> None:
    outbox = await PostgresOutbox.open(dsn, lease_s=lease_s)
    items = await outbox.due(n)
    ids = " ".join(i.id for i in items)
    if mode == "claim":
        print(f"claimed {ids}", flush=True)
        await asyncio.sleep(3600)
    config = BackendConfig(state_dir=Path("."), embedder=LocalEmbedder(), options={"dsn": dsn})
    backend = await create_backend("postgres", config)
    auditor = ScriptedAuditor(delay_s=3600)
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "postgres"}})
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="postgres",
                          auditor=auditor, policy=policy.audit, metrics=Metrics())  # fmt: skip
    tasks = [asyncio.create_task(worker.process(item)) for item in items]
    while len(auditor.calls) < len(items):
        await asyncio.sleep(0.02)
    print(f"auditing {ids}", flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]))
