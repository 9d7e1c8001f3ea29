"""Durability: an acknowledged chat answer always ends as a stored, audited memory.

1. A real proxy process (mem0 on disk) is SIGKILLed in the middle of a load run and
   restarted on the same state directory: every request that got its whole answer has
   its memory stored exactly once and audited. The upstream and the auditor are the
   shipped fake server (not a model: the test is about the process dying, not about
   judgement); the auditor fake answers a valid "clean" verdict after a delay, so the
   kill lands while audits are still queued.
2. In process, the memory store is made unavailable (a test double around the real
   in-memory backend whose calls raise while a switch is on): chat keeps answering
   without memory and says so in ``x-dmt-memory``, writes queue in the outbox, and
   drain once the store is back.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import Counter
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, MemoryStoreError, Scope, SearchHit
from dmt_proxy.provenance import AuditStamp
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.testing.app import InProcessApp
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.fixtures import OpenApp
from tests.proxy_process import (
    ADMIN,
    CLEAN_VERDICT,
    FakeUpstream,
    ProxyProcess,
    admin_memories,
    proxy_env,
    wait_outbox_empty,
    write_policy,
)
from tests.reliability.harness import LoadRun
from tests.timing import budget

# -- 1. SIGKILL mid-load -----------------------------------------------------------


def outbox_depth(state: Path) -> int:
    with closing(sqlite3.connect(state / "outbox.sqlite3")) as db:
        return int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])


@pytest.mark.slow
async def test_sigkill_mid_load_loses_no_acknowledged_write(
    proxy_factory: Callable[..., ProxyProcess],
    fakes: Callable[..., FakeUpstream],
    tmp_path: Path,
    report: Callable[[str], None],
) -> None:
    chat = fakes()
    auditor = fakes("--answer", CLEAN_VERDICT, "--delay-s", "0.1")
    policy = write_policy(tmp_path / "policy.yaml", models={"fast": chat, "auditor": auditor},
                          default_model="fast", backend="mem0",
                          audit={"auditor_model": "auditor"})  # fmt: skip
    state = tmp_path / "state"
    proxy = proxy_factory("--policy", str(policy), env=proxy_env(), state_dir=state)
    load = LoadRun(proxy.base_url, total=200, concurrency=8)
    kill_after = 80
    killed: dict[str, int] = {}

    async def kill_mid_load(run: LoadRun) -> None:
        if not killed and len(run.acknowledged) >= kill_after:
            proxy.kill()  # SIGKILL: no shutdown hook, no snapshot, no flush
            killed["sent"] = len(run.outcomes)

    await load.run(kill_mid_load)
    assert killed, (
        f"the load finished before {kill_after} answers: {Counter(o.status for o in load.outcomes)}"
    )
    acked = load.acknowledged
    queued_at_kill = outbox_depth(state)
    assert queued_at_kill > 0, "nothing was queued at the kill; the test proves nothing"

    restarted = proxy_factory("--policy", str(policy), env=proxy_env(), state_dir=state,
                              port=proxy.port)  # fmt: skip
    drain_s = wait_outbox_empty(restarted.base_url, timeout_s=240)
    stored: dict[str, list[dict[str, Any]]] = {}
    for user in sorted({o.user for o in load.outcomes}):
        for row in admin_memories(restarted.base_url, user):
            stored.setdefault(row["text"].split("\n")[0].removeprefix("User: "), []).append(row)
    lost = [o.text for o in acked if o.text not in stored]
    duplicated = [text for text, rows in stored.items() if len(rows) > 1]
    unaudited = [r["id"] for rows in stored.values() for r in rows if r["audit_status"] != "clean"]
    unacked_stored = sum(1 for o in load.outcomes if not o.acknowledged and o.text in stored)
    report(
        f"durability/SIGKILL: {len(load.outcomes)} sent, {len(acked)} acknowledged "
        f"({sum(o.stream for o in acked)} streams), killed after {killed['sent']} responses "
        f"with {queued_at_kill} writes queued; after restart: drained in {drain_s:.1f}s, "
        f"lost={len(lost)}, duplicated={len(duplicated)}, not audited={len(unaudited)}, "
        f"in flight at the kill yet stored={unacked_stored}"
    )
    assert lost == [], f"{len(lost)} acknowledged write(s) lost, e.g. {lost[:3]}"
    assert duplicated == [], f"duplicated memories: {duplicated[:3]}"
    assert unaudited == [], f"memories not audited after the drain: {unaudited[:3]}"


# -- 2. memory store unavailable -----------------------------------------------------


class OutageBackend:
    """Test double: the real in-memory backend behind a switch that makes chosen calls fail.

    It stands in for a store that is down (disk full, lock held, server gone), which the
    real backends cannot be made to produce on demand.
    """

    name: ClassVar[str] = "outage"

    def __init__(self, inner: InMemoryBackend) -> None:
        self.inner = inner
        self.failing: set[str] = set()
        self.failures: Counter[str] = Counter()

    def _gate(self, op: str) -> None:
        if op in self.failing:
            self.failures[op] += 1
            raise MemoryStoreError(f"memory store unavailable ({op})")

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        self._gate("search")
        return await self.inner.search(scope, query, k, include_quarantined=include_quarantined)

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        self._gate("write")
        return await self.inner.write(scope, record)

    async def update(
        self,
        scope: Scope,
        id: str,
        *,
        audit_status: AuditStatus,
        tag: BiasTag | None,
        audited: AuditStamp | None = None,
    ) -> MemoryRecord | None:
        self._gate("update")
        return await self.inner.update(scope, id, audit_status=audit_status, tag=tag,
                                       audited=audited)  # fmt: skip

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        return await self.inner.get(scope, id)

    async def scope_of(self, id: str) -> Scope | None:
        return await self.inner.scope_of(id)

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        return await self.inner.list(scope, limit=limit)

    async def delete(self, scope: Scope, id: str) -> bool:
        return await self.inner.delete(scope, id)

    async def delete_all(self, scope: Scope) -> int:
        return await self.inner.delete_all(scope)

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture
async def outage_app(state_dir: Path, open_app: OpenApp) -> tuple[InProcessApp, OutageBackend]:
    """The real app in process, with the scripted upstream and auditor (fakes, see above)."""
    settings = Settings.from_env({}, state_dir=state_dir, admin_key=ADMIN["authorization"][7:])
    # The scripted auditor alone (the first stage, on by default, is not under test).
    policy = {"version": 1, "mode": "dmt", "memory": {"backend": "memory", "top_k": 3},
              "audit": {"tau": 0.5, "first_stage": "off"}}  # fmt: skip
    backend = OutageBackend(InMemoryBackend())
    proxy = await open_app(settings, policy=policy, upstream=ScriptedChatModel(["Noted."]),
                           memory_backend=backend, auditor=ScriptedAuditor())  # fmt: skip
    return proxy, backend


def ask(client: httpx.AsyncClient, i: int) -> Any:
    body = {"model": "local/smollm2", "user": f"u{i % 4}",
            "messages": [{"role": "user", "content": f"Remember fact number {i}."}]}  # fmt: skip
    return client.post("/v1/chat/completions", json=body)


async def all_memories(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for user in ("u0", "u1", "u2", "u3"):
        resp = await client.get("/v1/memories", params={"user": user}, headers=ADMIN)
        rows += resp.json()["data"]
    return rows


@pytest.mark.parametrize("failing", [{"search", "write", "update"}, {"update"}],
                         ids=["store-down", "updates-down"])  # fmt: skip
async def test_store_outage_queues_writes_then_drains(
    outage_app: tuple[InProcessApp, OutageBackend],
    failing: set[str],
    report: Callable[[str], None],
) -> None:
    proxy, backend = outage_app
    client = proxy.client
    n = 40
    backend.failing = set(failing)
    responses = await asyncio.gather(*(ask(client, i) for i in range(n)))
    assert [r.status_code for r in responses] == [200] * n, "chat must keep answering"
    if "search" in failing:
        assert {r.headers["x-dmt-memory"] for r in responses} == {
            "unavailable (MemoryStoreError); answered without memory"
        }
    # The worker retries against the dead store meanwhile. The outage lasts 1.5 s, and on a
    # slow machine until the worker has met it once per write (the deadline: a hang guard).
    await asyncio.sleep(1.5)
    deadline = time.monotonic() + budget(30)
    while sum(backend.failures[op] for op in ("write", "update")) < n:
        assert time.monotonic() < deadline, f"fewer than {n} failed store calls: {backend.failures}"
        await asyncio.sleep(0.05)
    outbox = (await client.get("/v1/admin/outbox", headers=ADMIN)).json()
    assert outbox["depth"] == n, "a write left the outbox while the store was down"
    retried_during = sum(backend.failures[op] for op in ("write", "update"))
    assert retried_during >= n

    backend.failing.clear()
    started = time.monotonic()
    assert await proxy.memory.drain(timeout_s=30)
    drain_s = time.monotonic() - started
    rows = await all_memories(client)
    assert sorted(r["text"] for r in rows) == sorted(
        f"User: Remember fact number {i}.\nAssistant: Noted." for i in range(n)
    )
    assert {r["audit_status"] for r in rows} == {"clean"}
    metrics = (await client.get("/metrics")).text
    assert 'dmt_memory_writes_total{backend="memory",outcome="retried"}' in metrics
    after = await ask(client, 0)
    assert after.headers["x-dmt-memory"] == "read-write" and after.headers["x-dmt-memories"] != "0"
    report(
        f"durability/store outage ({'+'.join(sorted(failing))} failing): {n} chats answered "
        f"during the outage, {retried_during} failed store calls retried, drained "
        f"{n}/{n} in {drain_s:.1f}s after recovery, lost=0"
    )
