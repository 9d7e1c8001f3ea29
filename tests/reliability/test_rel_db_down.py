"""The PostgreSQL server stopped mid-load: chat keeps answering, no acknowledged write is lost.

A real ``dmt-proxy serve`` (postgres memory backend, the shared outbox, its built-in
worker) on the fake upstream, and a PostgreSQL cluster of its own (this test stops
it with ``pg_ctl``, so it cannot share the session's). While the server is down the
proxy answers without memory (``x-dmt-memory: unavailable``) and commits writes to
its local spool; once the server is back the spool is forwarded, and every write
the client saw acknowledged is stored exactly once.

Failing fast: the first request that meets the dead server opens the store's circuit;
every later one skips retrieval and spools its write without waiting on the database,
until the circuit's probe reaches the restarted server. The outage is logged as
warnings naming their cause, never as a traceback, and streams report their write
(``: x-dmt-memory-write: queued``) as plain responses do.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from dmt_proxy.testing.pg import PgCluster, find_bindir
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
from tests.reliability.harness import metric, scrape
from tests.timing import budget

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

USERS = 4


@pytest.fixture
def own_cluster(pg_cluster: PgCluster) -> Iterator[PgCluster]:
    """A second throwaway server (same binaries as the session's), free to be stopped;
    durable, since an acknowledged write must survive the server's crash too."""
    cluster = PgCluster(bindir=find_bindir() or pg_cluster.bindir, durable=True)
    try:
        cluster.init().start()
        cluster.execute("CREATE EXTENSION vector")
        yield cluster
    finally:
        cluster.destroy()


def send(client: httpx.Client, i: int, *, stream: bool = False) -> tuple[str, httpx.Response]:
    text = f"Outage note {i:03d}: remember the code word w{i:03d}x."
    body = {"model": "fast", "user": f"outage-{i % USERS}", "stream": stream,
            "messages": [{"role": "user", "content": text}]}  # fmt: skip
    return text, client.post("/chat/completions", json=body)


def test_the_database_stopped_mid_load_loses_no_acknowledged_write(
    own_cluster: PgCluster,
    tmp_path: Path,
    fakes: Callable[..., FakeUpstream],
    proxy_factory: Callable[..., ProxyProcess],
    report: Callable[[str], None],
) -> None:
    upstream, auditor = fakes(), fakes("--answer", CLEAN_VERDICT)
    policy_path = write_policy(tmp_path / "policy.yaml",
                               models={"fast": upstream, "auditor": auditor},
                               default_model="fast", backend="postgres",
                               audit={"auditor_model": "auditor"})  # fmt: skip
    policy = yaml.safe_load(policy_path.read_text())
    # A short pool timeout: while the server is down each retrieval gives up after 1 s.
    policy["memory"]["options"] = {"connect_timeout_s": 1}
    policy_path.write_text(yaml.safe_dump(policy, sort_keys=False))
    env = proxy_env(DMT_DATABASE_URL=own_cluster.dsn(), DMT_OUTBOX_LEASE_S="5")
    proxy = proxy_factory("--policy", str(policy_path), state_dir=tmp_path / "proxy", env=env)

    acknowledged: list[str] = []
    up_latency: list[float] = []
    down_headers: list[str] = []
    down_latency: list[float] = []
    with httpx.Client(base_url=proxy.base_url, timeout=30) as client:
        for i in range(20):
            started = time.monotonic()
            text, resp = send(client, i)
            up_latency.append(time.monotonic() - started)
            assert resp.status_code == 200, resp.text
            acknowledged.append(text)

        own_cluster.stop("immediate")  # like a crash: no checkpoint, connections cut
        stopped = time.monotonic()
        for i in range(20, 40):
            started = time.monotonic()
            text, resp = send(client, i, stream=i % 4 == 3)
            down_latency.append(time.monotonic() - started)
            assert resp.status_code == 200, resp.text
            if i % 4 == 3:  # a stream reports its write in-band, before [DONE]
                assert resp.content.endswith(b": x-dmt-memory-write: queued\n\ndata: [DONE]\n\n")
            else:
                assert resp.headers["x-dmt-memory-write"] == "queued"
            down_headers.append(resp.headers["x-dmt-memory"])
            acknowledged.append(text)
        down_s = time.monotonic() - stopped
        circuit_open = metric(scrape(proxy), "dmt_store_circuit_state")

        own_cluster.start()
        for i in range(40, 60):
            text, resp = send(client, i)
            assert resp.status_code == 200, resp.text
            acknowledged.append(text)

    assert all(h.startswith("unavailable") for h in down_headers), down_headers
    # The first request waited for the dead server until the circuit's reachability check
    # (after 0.25 s) found new connections refused; the circuit it opened lets every
    # later one answer without touching the database.
    assert circuit_open in (1, 2), "the circuit is open (or probing) while the server is down"
    assert all("store circuit open" in h for h in down_headers[1:]), down_headers
    # Nor do they wait on the database: each is at most twice as slow as the slowest with the
    # server up (this machine's own pace; the first, cold request left out) or 0.5 s,
    # whichever is more. One that waited on the dead pool would add its 1 s connect timeout.
    bound = max(0.5, 2 * max(up_latency[1:]))
    assert max(down_latency[1:]) < bound, (down_latency, bound)
    drained_s = wait_outbox_empty(proxy.base_url, timeout_s=120)

    stored: dict[str, int] = {}
    for u in range(USERS):
        for memory in admin_memories(proxy.base_url, f"outage-{u}"):
            assert memory["audit_status"] == "clean", memory
            for text in acknowledged:
                if text in memory["text"]:
                    stored[text] = stored.get(text, 0) + 1
    lost = [t for t in acknowledged if t not in stored]
    duplicated = [t for t, n in stored.items() if n > 1]
    assert not lost and not duplicated, (lost, duplicated)

    text = scrape(proxy)
    spooled = metric(text, "dmt_outbox_spooled_total")
    assert spooled >= 19  # the first write during the outage may have reached a dying server
    assert metric(text, "dmt_outbox_spool_forwarded_total") == spooled
    assert metric(text, "dmt_outbox_spool_depth") == 0
    assert metric(text, "dmt_store_circuit_opened_total") >= 1
    assert metric(text, "dmt_store_circuit_state") == 0, "closed again once the server is back"
    log = proxy.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "failed unexpectedly" not in log, log[-3000:]
    assert "unreachable ()" not in log, "every outage warning names its cause"
    report(f"database down mid-load: 60 acknowledged, 0 lost, 0 duplicated; {spooled:.0f} "
           f"spooled during {down_s:.1f}s down (first request {down_latency[0]:.2f}s, the "
           f"next 19 at most {max(down_latency[1:]):.3f}s), outbox drained {drained_s:.1f}s "
           "after")  # fmt: skip


def test_two_proxies_and_a_worker_fail_fast_and_audit_once_through_an_outage(
    own_cluster: PgCluster,
    tmp_path: Path,
    fakes: Callable[..., FakeUpstream],
    proxy_factory: Callable[..., ProxyProcess],
    workers: Callable[..., WorkerProcess],
    report: Callable[[str], None],
) -> None:
    """The scale-out: two ``serve --no-worker`` and a ``dmt-proxy worker``, four clients
    in parallel, the server stopped (``-m fast``) for 4 s mid-load and started again."""
    upstream, auditor = fakes(), fakes("--answer", CLEAN_VERDICT)
    policy = write_policy(tmp_path / "policy.yaml", models={"fast": upstream, "auditor": auditor},
                          default_model="fast", backend="postgres",
                          audit={"auditor_model": "auditor", "verdict": "json"})  # fmt: skip
    env = proxy_env(DMT_DATABASE_URL=own_cluster.dsn(), DMT_WORKER="off", DMT_LOG_LEVEL="info")
    proxies = [proxy_factory("--policy", str(policy), state_dir=tmp_path / f"p{k}", env=env)
               for k in range(2)]  # fmt: skip
    worker = workers("--policy", str(policy), env=env)
    ready_by = time.monotonic() + 120  # up and draining before the server goes away
    while "draining the outbox" not in worker.log_path.read_text(errors="replace"):
        worker.check_running()
        assert time.monotonic() < ready_by, "the worker did not start"
        time.sleep(0.1)

    sent: list[tuple[str, str, float, float, httpx.Response]] = []
    lock = threading.Lock()
    counter = iter(range(10_000))

    def client_loop(until: float) -> None:
        with httpx.Client(timeout=30) as client:
            while time.monotonic() < until:
                with lock:
                    i = next(counter)
                user, text = f"fleet-{i % USERS}", f"Fleet note {i:04d}: code word f{i}x."
                body = {"model": "fast", "user": user, "stream": i % 4 == 3,
                        "messages": [{"role": "user", "content": text}]}  # fmt: skip
                started = time.monotonic()
                resp = client.post(f"{proxies[i % 2].base_url}/chat/completions", json=body)
                with lock:
                    sent.append((user, text, started, time.monotonic(), resp))
                time.sleep(0.05)

    def load(seconds: float) -> None:
        until = time.monotonic() + seconds
        threads = [threading.Thread(target=client_loop, args=(until,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    load(3)
    baseline = [end - start for _u, _t, start, end, _r in sent]
    own_cluster.stop("fast")
    stopped = time.monotonic()
    load(4)
    own_cluster.start()
    load(3)
    worker.check_running()

    def acknowledged(resp: httpx.Response) -> bool:
        if resp.headers["content-type"].startswith("text/event-stream"):
            return resp.content.endswith(b": x-dmt-memory-write: queued\n\ndata: [DONE]\n\n")
        return resp.headers.get("x-dmt-memory-write") == "queued"

    assert all(r.status_code == 200 and acknowledged(r) for *_x, r in sent)
    during = [(start, end, r) for _u, _t, start, end, r in sent if stopped <= start < stopped + 4]
    first_failure = min(end for _s, end, r in during if r.headers["x-dmt-memory"] != "read-write")
    after = sorted(end - start for start, end, _r in during if start >= first_failure)
    p95 = after[int(0.95 * (len(after) - 1))]
    baseline_p95 = sorted(baseline)[int(0.95 * (len(baseline) - 1))]
    assert p95 <= max(2 * baseline_p95, 0.5), (p95, baseline_p95)
    # Expected well under a second (the circuit's 0.25 s check); the bound is a coarse guard
    # against waiting out the store's timeouts, scaled for a slow machine.
    assert first_failure - stopped < budget(2), "the first request of the outage waited too long"

    wait_outbox_empty(proxies[0].base_url, timeout_s=120)
    wait_outbox_empty(proxies[1].base_url, timeout_s=120)
    stored: dict[str, list[str]] = {}
    for u in range(USERS):
        for memory in admin_memories(proxies[0].base_url, f"fleet-{u}"):
            assert memory["audit_status"] == "clean", memory
            stored.setdefault(memory["text"].split("\n")[0], []).append(f"fleet-{u}")
    by_text = {f"User: {text}": user for user, text, *_x in sent}
    assert set(stored) == set(by_text), "lost or unexpected memories"
    assert all(users == [by_text[t]] for t, users in stored.items()), "duplicated or misplaced"
    assert auditor.requests() == len(sent), "an audit was repeated"
    logs = [p.log_path.read_text(errors="replace") for p in proxies]
    logs.append(worker.log_path.read_text(errors="replace"))
    assert not any("Traceback" in log or "failed unexpectedly" in log for log in logs)
    report(f"fleet through a 4 s outage: {len(sent)} acknowledged ({len(during)} during it), "
           f"0 lost, 0 duplicated, 0 repeated audits; first failure "
           f"{first_failure - stopped:.2f}s in, then p95 {p95 * 1000:.0f} ms (baseline p95 "
           f"{baseline_p95 * 1000:.0f} ms)")  # fmt: skip
