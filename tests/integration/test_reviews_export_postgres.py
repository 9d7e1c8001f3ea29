"""dmt-proxy reviews export from the PostgreSQL trail (a real, throwaway PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from dmt_proxy.api import create_app
from dmt_proxy.memory.assembly import export_reviews
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.unit.test_review import ADMIN, seed
from tests.unit.test_reviews_calibrate import judge


@pytest.mark.postgres
async def test_export_on_postgres(tmp_path: Path, pg_dsn: str) -> None:
    from dmt_proxy.embedder import LocalEmbedder
    from dmt_proxy.memory.registry import BackendConfig, create_backend

    options = {"table_prefix": "ex_", "dsn": pg_dsn}
    backend = await create_backend("postgres", BackendConfig(
        state_dir=tmp_path, embedder=LocalEmbedder(), options=options))  # fmt: skip
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key",
                                 database_url=pg_dsn)  # fmt: skip
    # The scripted judge alone (the first stage, on by default, is not under test).
    policy = parse_policy({"version": 1, "mode": "dmt", "audit": {"first_stage": "off"},
                           "memory": {"backend": "postgres", "options": {"table_prefix": "ex_"}}})  # fmt: skip
    app = create_app(settings, policy=policy, upstream=ScriptedChatModel(["ok"]),
                     memory_backend=backend, auditor=ScriptedAuditor(judge))  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as c,
    ):
        mid = await seed(app, c, "acme/ann", "remark 0.9")
        other = await seed(app, c, "globex/bo", "remark 0.6")
        for m, action in ((mid, "confirm"), (other, "clear")):
            assert (await c.post(f"/v1/memories/{m}/review", json={"action": action},
                                 headers=ADMIN)).is_success  # fmt: skip
    rows = await export_reviews(settings, policy, chat=ScriptedChatModel(["ok"]))
    assert {(r.memory_id, r.biased, r.text) for r in rows} == {
        (mid, True, "remark 0.9"), (other, False, "remark 0.6")}  # fmt: skip
    acme = await export_reviews(settings, policy, tenant="acme", chat=ScriptedChatModel(["ok"]))
    assert [r.memory_id for r in acme] == [mid]
