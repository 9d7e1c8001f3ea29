"""The review console from a process of its own on a shared PostgreSQL outbox (a real PostgreSQL and a real proxy process)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.unit.test_console import sign_in
from tests.unit.test_review import seed


@pytest.mark.postgres
async def test_console_process_on_a_shared_postgres_deployment(tmp_path: Path, pg_dsn: str) -> None:
    """A proxy with its worker writes and audits; a console (worker off) on the same
    database reviews; the proxy's next retrieval shows the human verdict."""
    from dmt_proxy.api import create_app
    from dmt_proxy.embedder import LocalEmbedder
    from dmt_proxy.memory.registry import BackendConfig, create_backend
    from dmt_proxy.policy import parse_policy
    from dmt_proxy.settings import Settings
    from dmt_proxy.testing.auditor import ScriptedAuditor
    from dmt_proxy.testing.chat import ScriptedChatModel
    from tests.unit.test_review import ADMIN, judge

    embedder = LocalEmbedder()
    policy = parse_policy({"version": 1, "mode": "dmt", "audit": {"first_stage": "off"},
                           "memory": {"backend": "postgres", "options": {"table_prefix": "cs_"}}})  # fmt: skip

    async def app_for(name: str, worker: bool) -> Any:
        backend = await create_backend("postgres", BackendConfig(
            state_dir=tmp_path / name, embedder=embedder,
            options={"table_prefix": "cs_", "dsn": pg_dsn}))  # fmt: skip
        settings = Settings.from_env({}, state_dir=tmp_path / name, admin_key="admin-key",
                                     database_url=pg_dsn, worker=worker)  # fmt: skip
        return create_app(settings, policy=policy, upstream=ScriptedChatModel(["noted"]),
                          memory_backend=backend, auditor=ScriptedAuditor(judge))  # fmt: skip

    proxy_app, console_app = await app_for("proxy", True), await app_for("console", False)
    async with (
        proxy_app.router.lifespan_context(proxy_app),
        console_app.router.lifespan_context(console_app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy_app), base_url="http://p") as p,
        httpx.AsyncClient(transport=httpx.ASGITransport(app=console_app), base_url="http://p") as c,
    ):
        mid = await seed(proxy_app, p, "alice", "People over 60 are slow.")
        token = await sign_in(c)
        assert mid in (await c.get("/console/queue")).text
        done = await c.post(f"/v1/memories/{mid}/review", json={"action": "clear"},
                            headers={"x-csrf-token": token})  # fmt: skip
        assert done.status_code == 200, done.text
        seen = (await p.get(f"/v1/memories/{mid}", headers=ADMIN)).json()
        assert seen["audit_status"] == "clean" and seen["tag"] is None
        history = (await p.get(f"/v1/memories/{mid}/evidence", headers=ADMIN)).json()["history"]
        assert [e["actor"] for e in history] == ["auditor:scripted@fake", "reviewer:rita"]
