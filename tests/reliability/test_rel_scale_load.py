"""Scale-out under load: two proxies and two workers on one database, one of each killed.

Real processes: two ``dmt-proxy serve --no-worker`` and two ``dmt-proxy worker`` on
the session's throwaway PostgreSQL (memory store and outbox), the fake upstream
(instant) and a fake auditor that answers a clean verdict after 50 ms, so the
workers have audits in flight when one is killed. 300 requests alternate between
the proxies; mid-load one proxy and one worker get SIGKILL and are restarted.

Checked: every write the client saw acknowledged is stored exactly once and audited
(clean); none is lost or duplicated; the auditor is asked once per write, except
for audits the killed worker had started and not yet saved (a verdict is saved on
the row as soon as it arrives; at most the worker's concurrency, 2, can be lost).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.proxy_process import (
    CLEAN_VERDICT,
    FakeUpstream,
    ProxyProcess,
    WorkerProcess,
    admin_memories,
    proxy_env,
    wait_outbox_empty,
    write_policy,
)

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

TOTAL = 300
USERS = 10
CONCURRENCY = 8
KILL_AFTER = 100
WORKER_CONCURRENCY = 2


@dataclass
class Sent:
    index: int
    user: str
    text: str
    acknowledged: bool = False


def _sent(i: int) -> Sent:
    return Sent(index=i, user=f"scale-{i % USERS}",
                text=f"Scale note {i:03d}: remember the marker m{i:03d}-{i * 7919 % 10007}.")  # fmt: skip


async def _load(
    proxies: list[ProxyProcess], down: set[int], on_progress: Callable[[int], None]
) -> list[Sent]:
    """Send ``TOTAL`` requests, request i to proxy i % 2 unless that one is ``down`` (then to
    the other, as a load balancer would); ``on_progress(acknowledged)`` after each."""
    queue: asyncio.Queue[Sent] = asyncio.Queue()
    for i in range(TOTAL):
        queue.put_nowait(_sent(i))
    done: list[Sent] = []
    acked = 0
    async with httpx.AsyncClient(timeout=30) as client:

        async def one() -> None:
            nonlocal acked
            while not queue.empty():
                item = queue.get_nowait()
                n = item.index % len(proxies)
                proxy = proxies[1 - n if n in down else n]
                body = {"model": "fast", "user": item.user,
                        "messages": [{"role": "user", "content": item.text}]}  # fmt: skip
                try:
                    resp = await client.post(f"{proxy.base_url}/chat/completions", json=body)
                    item.acknowledged = resp.status_code == 200 and bool(resp.json().get("choices"))
                except (httpx.HTTPError, ValueError):
                    item.acknowledged = False
                done.append(item)
                acked += item.acknowledged
                await asyncio.to_thread(on_progress, acked)

        await asyncio.gather(*(one() for _ in range(CONCURRENCY)))
    return done


def test_two_proxies_two_workers_one_of_each_killed_lose_nothing(
    pg_dsn: str,
    tmp_path: Path,
    fakes: Callable[..., FakeUpstream],
    proxy_factory: Callable[..., ProxyProcess],
    workers: Callable[..., WorkerProcess],
    report: Callable[[str], None],
) -> None:
    upstream = fakes()
    auditor = fakes("--answer", CLEAN_VERDICT, "--delay-s", "0.05")
    policy = write_policy(tmp_path / "policy.yaml", models={"fast": upstream, "auditor": auditor},
                          default_model="fast", backend="postgres",
                          # The fake auditor has no log-probs: on the default "auto" path
                          # each fresh worker would first probe for them, and those probes
                          # would blur the count of audits repeated after the kill.
                          audit={"auditor_model": "auditor", "verdict": "json"})  # fmt: skip
    env = proxy_env(DMT_DATABASE_URL=pg_dsn, DMT_WORKER="off", DMT_OUTBOX_LEASE_S="3")
    proxies = [proxy_factory("--policy", str(policy), state_dir=tmp_path / f"proxy-{n}", env=env)
               for n in range(2)]  # fmt: skip
    pool = [workers("--policy", str(policy), env=env) for _ in range(2)]
    killed: dict[str, float] = {}
    down: set[int] = set()

    def chaos(acknowledged: int) -> None:
        # Runs on a thread between requests; one kill and one restart, each once.
        if acknowledged >= KILL_AFTER and "at" not in killed:
            killed["at"] = time.monotonic()
            down.add(0)
            proxies[0].kill()  # SIGKILL
            pool[0].kill()  # SIGKILL, with audits in flight
        elif "at" in killed and "restarted" not in killed and time.monotonic() - killed["at"] > 2:
            killed["restarted"] = time.monotonic()
            proxies[0].start("--policy", str(policy))  # same port and state dir
            pool[0].start("--policy", str(policy))
            down.discard(0)

    started = time.monotonic()
    sent = asyncio.run(_load(proxies, down, chaos))
    load_s = time.monotonic() - started
    assert "restarted" in killed, "the load finished before the kill and the restart"
    acknowledged = [s for s in sent if s.acknowledged]
    assert len(acknowledged) >= TOTAL * 0.8, f"only {len(acknowledged)} of {TOTAL} answered"

    drain_s = wait_outbox_empty(proxies[1].base_url, timeout_s=180)
    for worker in pool:
        worker.check_running()

    counts: dict[str, int] = {}
    statuses: set[str] = set()
    for u in range(USERS):
        for memory in admin_memories(proxies[1].base_url, f"scale-{u}"):
            statuses.add(memory["audit_status"])
            for s in sent:
                if s.text in memory["text"]:
                    counts[s.text] = counts.get(s.text, 0) + 1
    lost = [s.index for s in acknowledged if s.text not in counts]
    duplicated = [t for t, n in counts.items() if n > 1]
    unacked_stored = sum(1 for s in sent if not s.acknowledged and s.text in counts)
    audits = auditor.requests()
    repeated = audits - len(counts)
    report(
        f"scale-out load: {TOTAL} requests over 2 proxies, 2 workers; proxy and worker SIGKILLed "
        f"after {KILL_AFTER} answers, restarted; {len(acknowledged)} acknowledged in "
        f"{load_s:.1f}s, drained {drain_s:.1f}s later; lost={len(lost)}, "
        f"duplicated={len(duplicated)}, audit calls={audits} for {len(counts)} memories "
        f"(repeated {repeated}), in flight at the kill yet stored={unacked_stored}"
    )
    assert lost == [] and duplicated == [], (lost[:5], duplicated[:5])
    assert statuses == {"clean"}, statuses
    # Each stored memory was audited; a repeat only for an audit the killed worker held.
    assert 0 <= repeated <= WORKER_CONCURRENCY, audits
