"""Tenancy on PostgreSQL: the cross-tenant property of ``tests/unit/test_tenancy.py`` with the
``postgres`` backend and outbox (a real server from ``dmt_proxy/testing/pg.py``), where the
scope filter is SQL."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from hypothesis import HealthCheck, given, settings

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.memory.registry import BackendConfig, create_backend
from tests.unit.test_tenancy import TENANT_WRITES, check_no_cross_tenant_reads, make_app


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


@pytest.mark.postgres
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(writes=TENANT_WRITES)
def test_no_cross_tenant_reads_on_postgres(
    tmp_path_factory: pytest.TempPathFactory,
    pg_dsn: str,
    embedder: LocalEmbedder,
    writes: list[tuple[str, str]],
) -> None:
    """The same property with the memory store and the outbox in PostgreSQL."""
    tmp = tmp_path_factory.mktemp("tenancy-pg")
    # Each example gets its own tables in the test's database (a prefix of its own).
    memory = {"backend": "postgres", "options": {"table_prefix": f"t{uuid.uuid4().hex[:8]}_"}}

    async def scenario() -> None:
        config = BackendConfig(state_dir=tmp, embedder=embedder,
                               options={**memory["options"], "dsn": pg_dsn})  # fmt: skip
        backend = await create_backend("postgres", config)
        app, chat = make_app(tmp, backend, memory, database_url=pg_dsn)
        await check_no_cross_tenant_reads(app, chat, writes)  # closes the backend on exit

    asyncio.run(scenario())
