"""Latency guard: large and adversarial memories being written and audited do not stall
other requests (issue 42).

A real proxy process (mode dmt, in-memory store, fake upstream, a fake auditor that calls
everything clean: no model time in any figure). First a prober measures ``/healthz`` and a
small chat request on the idle proxy; then a writer sends legal turns of 0.1 to 3.5 MB
(plain, zero-width-laden, leetspeak, one group word repeated, a stereotype buried in the
middle) with a user, so the outbox worker bounds, normalises and audits each one, while
the prober keeps going. Before the audit work left the event loop, one 3.5 MB memory froze
every request for ~10-15 s.

Bounds are relative to what this machine measured idle (so a slow CI machine moves them
with it) with a floor of 250 ms: p99 under load at most ``max(0.25 s, 5 x idle p99)``, and
the proxy's own event-loop lag histogram (``dmt_event_loop_lag_seconds``) never above 1 s.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from dmt_bench.stats import percentile
from tests.proxy_process import FakeUpstream, ProxyProcess, admin_memories, wait_outbox_empty
from tests.reliability.harness import metric, proxy_with_clean_auditor, scrape

FLOOR_S = 0.25
IDLE_FACTOR = 5.0
STEREOTYPE = "Old people can never learn new technology, it is pointless to teach them."


def large_memories() -> list[str]:
    """Legal, hostile-shaped user turns (each under the 4 MiB body limit once JSON-encoded)."""
    filler = "We talked about the garden and the weekly shopping list. "
    return [
        "word " * 700_000,  # 3.5 MB of one word
        "z\u200bw\u200cj " * 250_000,  # zero-width characters inside every word
        "th3 w33kly sh0pp1ng l1st 4nd g4rd3n " * 30_000,  # leetspeak, ~1 MB
        "women " * 300_000,  # a group word a trigger for every sentence check
        filler * 10_000 + STEREOTYPE + " " + filler * 10_000,  # buried stereotype, ~1.1 MB
        "note " * 20_000,  # 100 KB
    ]


def lag_above(metrics: str, bound_s: float) -> float:
    """Samples of ``dmt_event_loop_lag_seconds`` above ``bound_s`` (a bucket bound)."""
    count = metric(metrics, "dmt_event_loop_lag_seconds_count")
    assert count > 0, "the proxy exports no dmt_event_loop_lag_seconds samples"
    return count - metric(metrics, "dmt_event_loop_lag_seconds_bucket", le=str(bound_s))


def probe(base: str, stop: threading.Event, chat: list[float], health: list[float]) -> None:
    body = {"model": "fast", "user": "prober", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(timeout=60) as client:
        while not stop.is_set():
            started = time.perf_counter()
            assert client.get(f"{base}/healthz").status_code == 200
            health.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert client.post(f"{base}/v1/chat/completions", json=body).status_code == 200
            chat.append(time.perf_counter() - started)
            time.sleep(0.02)


def test_large_memories_being_audited_do_not_stall_other_requests(
    proxy_factory: Callable[..., ProxyProcess],
    fakes: Callable[..., FakeUpstream],
    tmp_path: Path,
    report: Callable[[str], None],
) -> None:
    proxy = proxy_with_clean_auditor(proxy_factory, fakes, tmp_path / "policy.yaml")
    base = f"http://127.0.0.1:{proxy.port}"
    idle_chat: list[float] = []
    idle_health: list[float] = []
    stop = threading.Event()
    timer = threading.Timer(6.0, stop.set)
    timer.start()
    probe(base, stop, idle_chat, idle_health)
    idle_p99 = max(percentile(idle_chat, 99), percentile(idle_health, 99))
    bound = max(FLOOR_S, IDLE_FACTOR * idle_p99)
    lag_before = lag_above(scrape(proxy), 1.0)

    chat: list[float] = []
    health: list[float] = []
    stop = threading.Event()
    prober = threading.Thread(target=probe, args=(base, stop, chat, health), daemon=True)
    prober.start()
    sent = 0
    try:
        for text in large_memories():
            body = {
                "model": "fast",
                "user": "writer",
                "messages": [{"role": "user", "content": text}],
            }
            encoded = json.dumps(body).encode()
            resp = httpx.post(f"{proxy.base_url}/chat/completions", content=encoded, timeout=120,
                              headers={"content-type": "application/json"})  # fmt: skip
            assert resp.status_code == 200, resp.text[:200]
            sent += len(encoded)
        waited = wait_outbox_empty(proxy.base_url, timeout_s=300)
    finally:
        stop.set()
        prober.join(timeout=60)
    rows = admin_memories(proxy.base_url, "writer")
    assert len(rows) == len(large_memories())
    assert all(r["audit_status"] == "clean" for r in rows)
    # Every oversized memory's verdict states what the judges saw.
    excerpts = [f["detail"] for r in rows for f in (r["tag"] or {}).get("findings", [])
                if f["kind"] == "excerpt"]  # fmt: skip
    assert len(excerpts) == len(rows) and all(d.startswith("excerpt_v2") for d in excerpts)
    chat_p99, health_p99 = percentile(chat, 99), percentile(health, 99)
    after = scrape(proxy)
    stalls = lag_above(after, 1.0) - lag_before
    slow_ticks = {b: lag_above(after, b) for b in (0.05, 0.1, 0.25)}
    report(
        f"loop latency: {len(large_memories())} memories ({sent / 1e6:.1f} MB) audited in "
        f"{waited:.1f}s after the last write; idle p99 {idle_p99 * 1000:.0f} ms -> bound "
        f"{bound * 1000:.0f} ms; under load chat p99 {chat_p99 * 1000:.0f} ms (n={len(chat)}), "
        f"/healthz p99 {health_p99 * 1000:.0f} ms; loop lag samples > 1 s: {stalls:.0f}, over "
        f"the proxy's life > 50/100/250 ms: {'/'.join(f'{v:.0f}' for v in slow_ticks.values())}"
    )
    assert len(chat) >= 20, f"only {len(chat)} probes completed while the memories were audited"
    assert stalls == 0, f"{stalls:.0f} event-loop lag sample(s) above 1 s"
    assert chat_p99 <= bound, f"chat p99 {chat_p99:.3f}s > {bound:.3f}s"
    assert health_p99 <= bound, f"/healthz p99 {health_p99:.3f}s > {bound:.3f}s"
