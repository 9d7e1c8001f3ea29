"""Human review on the PostgreSQL outbox and trail (a real, throwaway PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dmt_proxy.api import create_app
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.unit.test_review import ADMIN, AGE, judge, seed


@pytest.mark.postgres
async def test_review_on_postgres(tmp_path: Path, pg_dsn: str) -> None:
    """The same review on the postgres backend, outbox and trail (one shared database)."""
    import psycopg

    from dmt_proxy.embedder import LocalEmbedder
    from dmt_proxy.memory.registry import BackendConfig, create_backend

    options = {"table_prefix": "rv_", "dsn": pg_dsn}
    backend = await create_backend(
        "postgres", BackendConfig(state_dir=tmp_path, embedder=LocalEmbedder(), options=options)
    )
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key",
                                 database_url=pg_dsn)  # fmt: skip
    policy = parse_policy({"version": 1, "mode": "dmt", "audit": {"first_stage": "off"},
                           "memory": {"backend": "postgres", "options": {"table_prefix": "rv_"}}})  # fmt: skip
    app = create_app(settings, policy=policy, upstream=ScriptedChatModel(["noted"]),
                     memory_backend=backend, auditor=ScriptedAuditor(judge))  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as c,
    ):
        mid = await seed(app, c, "alice", AGE)
        queue = (await c.get("/v1/reviews/queue", headers=ADMIN)).json()["data"]
        assert [i["id"] for i in queue] == [mid]
        done = await c.post(f"/v1/memories/{mid}/review", headers=ADMIN,
                            json={"action": "clear", "reason": "quoted"})  # fmt: skip
        assert done.status_code == 200, done.text
        detail = (await c.get(f"/v1/memories/{mid}/evidence", headers=ADMIN)).json()
        assert detail["memory"]["audit_status"] == "clean" and detail["held"] is True
        assert [e["actor"] for e in detail["history"]] == ["auditor:scripted@fake", "reviewer:rita"]
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for statement in ("UPDATE rv_review_trail SET actor = 'x'", "DELETE FROM rv_review_trail",
                          "TRUNCATE rv_review_trail"):  # fmt: skip
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                await conn.execute(statement)
