"""Scale-out on PostgreSQL: proxies and a separate worker sharing one database.

Real processes: two ``dmt-proxy serve --no-worker`` on the fake upstream (an instant
OpenAI-compatible server that is not a model; its auditor alias answers a clean
verdict), one ``dmt-proxy worker``, and the throwaway PostgreSQL server of
``dmt_proxy/testing/pg.py`` holding the memory store and the outbox.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.proxy_process import (
    ADMIN,
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


def chat(proxy: ProxyProcess, user: str, text: str) -> httpx.Response:
    body = {"model": "fast", "user": user, "messages": [{"role": "user", "content": text}]}
    resp = httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=30)
    assert resp.status_code == 200, resp.text
    return resp


def test_a_memory_written_through_one_proxy_is_retrieved_through_another(
    pg_dsn: str,
    tmp_path: Path,
    fakes: Callable[..., FakeUpstream],
    proxy_factory: Callable[..., ProxyProcess],
    workers: Callable[..., WorkerProcess],
) -> None:
    upstream, auditor = fakes(), fakes("--answer", CLEAN_VERDICT)
    policy = write_policy(tmp_path / "policy.yaml", models={"fast": upstream, "auditor": auditor},
                          default_model="fast", backend="postgres",
                          audit={"auditor_model": "auditor"})  # fmt: skip
    env = proxy_env(DMT_DATABASE_URL=pg_dsn, DMT_WORKER="off")
    proxy_a = proxy_factory("--policy", str(policy), state_dir=tmp_path / "a", env=env)
    proxy_b = proxy_factory("--policy", str(policy), state_dir=tmp_path / "b", env=env)

    written = chat(proxy_a, "carol", "Please remember that my dog is named Rex.")
    assert written.headers["x-dmt-memory-write"] == "queued"
    # One outbox for both proxies, and neither drains it (--no-worker via DMT_WORKER=off).
    # B's first request (a hang guard: a fresh process answers its first ones slowest).
    outbox = httpx.get(f"{proxy_b.base_url}/admin/outbox", headers=ADMIN, timeout=60).json()
    assert outbox["depth"] == 1
    [queued] = admin_memories(proxy_b.base_url, "carol")
    assert queued["audit_status"] == "pending"

    worker = workers("--policy", str(policy), env=env)
    try:
        wait_outbox_empty(proxy_b.base_url, timeout_s=120)
    finally:
        worker.check_running()
    [stored] = admin_memories(proxy_b.base_url, "carol")
    assert stored["id"] == queued["id"] and stored["audit_status"] == "clean"
    assert "my dog is named Rex" in stored["text"]

    read = chat(proxy_b, "carol", "What is my dog called?")
    assert read.headers["x-dmt-memories"] == "1"
    assert chat(proxy_b, "dave", "What is my dog called?").headers["x-dmt-memories"] == "0"
    assert worker.stop() == 0  # SIGTERM: a clean stop
