"""The ``postgres`` memory backend beyond the shared contract: start-up checks, schema
versions, what it keeps in SQL. A real PostgreSQL server (``dmt_proxy/testing/pg.py``).

The shared contract (search, scopes, idempotent writes, audit updates, reopen) runs
on this backend in ``test_memory_contract.py``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.pg_backend import MEMORY_SCHEMA_VERSION
from dmt_proxy.memory.base import MemoryRecord, MemoryStoreError, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.provenance import AuditStamp, Channel, Origin, Provenance
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.testing.pg import PgCluster

pytestmark = pytest.mark.postgres

TAG = BiasTag(bias_type="age", target_group="older workers", tendency="disfavoring", score=0.8)
WHEN = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


class TinyEmbedder:
    """An 8-dimensional embedder (a fake: only its dimension matters to the test using it)."""

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [[1.0 / math.sqrt(8)] * 8 for _ in texts]


def config(tmp_path: Path, embedder: object, **options: object) -> BackendConfig:
    return BackendConfig(state_dir=tmp_path, embedder=embedder, options=dict(options))  # type: ignore[arg-type]


async def test_unreachable_or_unparsable_database_stops_start_up(
    tmp_path: Path, embedder: LocalEmbedder, pg_cluster: PgCluster
) -> None:
    closed_port = f"postgresql://postgres@127.0.0.1:{pg_cluster.port + 1}/x?connect_timeout=2"
    with pytest.raises(ConfigError, match=r"cannot connect to PostgreSQL at postgres@127\.0\.0\.1"):
        await create_backend("postgres", config(tmp_path, embedder, dsn=closed_port))
    with pytest.raises(ConfigError, match="not a valid PostgreSQL connection string"):
        await create_backend("postgres", config(tmp_path, embedder, dsn="not a dsn"))
    with pytest.raises(ConfigError, match="needs a database: set DMT_DATABASE_URL"):
        await create_backend("postgres", config(tmp_path, embedder))
    missing_db = pg_cluster.dsn("no_such_database")
    with pytest.raises(ConfigError, match="no_such_database"):
        await create_backend("postgres", config(tmp_path, embedder, dsn=missing_db))
    with pytest.raises(ConfigError, match="table_prefix"):
        await create_backend("postgres", config(tmp_path, embedder, dsn=missing_db,
                                                table_prefix="x; drop"))  # fmt: skip


async def test_database_without_vector_extension_is_named(
    tmp_path: Path, embedder: LocalEmbedder, pg_cluster: PgCluster
) -> None:
    """A role that may not create the extension gets told what to run, and where."""
    dsn = pg_cluster.create_database(vector=False)
    pg_cluster.execute("DO $$ BEGIN CREATE ROLE plain LOGIN; EXCEPTION WHEN duplicate_object"
                       " THEN NULL; END $$")  # fmt: skip
    plain = dsn.replace("postgres@", "plain@")
    with pytest.raises(ConfigError, match=r"lacks the 'vector' extension.*CREATE EXTENSION vector"):
        await create_backend("postgres", config(tmp_path, embedder, dsn=plain))
    # A superuser (the database owner here) gets the extension created for it.
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=dsn))
    await backend.close()


async def test_schema_is_versioned_and_a_newer_one_is_refused(
    tmp_path: Path, embedder: LocalEmbedder, pg_dsn: str
) -> None:
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    await backend.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        versions = dict(conn.execute("SELECT component, version FROM dmt_schema_version"))
        assert versions == {"memory": MEMORY_SCHEMA_VERSION}
        indexes = {r[0] for r in conn.execute("SELECT indexdef FROM pg_indexes")}
        assert any("USING hnsw (embedding vector_cosine_ops)" in i for i in indexes)
        conn.execute("UPDATE dmt_schema_version SET version = 99 WHERE component = 'memory'")
    with pytest.raises(ConfigError, match="schema version 99, newer than this dmt-proxy"):
        await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    # Another prefix is another store in the same database, with its own version.
    other = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn,
                                                    table_prefix="other_"))  # fmt: skip
    await other.close()


async def test_a_table_of_layout_1_is_migrated_and_its_records_have_no_provenance(
    tmp_path: Path, embedder: LocalEmbedder, pg_dsn: str
) -> None:
    alice = Scope(user="alice")
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    old = MemoryRecord.from_interaction(alice, "My dog is Rex.", "Nice.")
    await backend.write(alice, old)
    await backend.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:  # the table as layout 1 had it
        conn.execute("ALTER TABLE dmt_memories DROP COLUMN provenance")
        conn.execute("UPDATE dmt_schema_version SET version = 1 WHERE component = 'memory'")
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    try:
        got = await backend.get(alice, old.id)
        assert got is not None and got.provenance is None and got.text == old.text
        stamp = AuditStamp(policy="default@0123456789ab", auditor="judge_v2", at=WHEN)
        audited = await backend.update(alice, old.id, audit_status=AuditStatus.CLEAN, tag=None,
                                       audited=stamp)  # fmt: skip
        assert audited is not None and audited.provenance is None
        # A model name with a NUL (any string a request names) is kept, NUL replaced.
        origin = Origin(channel=Channel.CHAT, model="m\x00x")
        new = MemoryRecord.from_interaction(alice, "I live in Lyon.", "Nice.", provenance=(
            Provenance.of(origin, request_id="req_1", received_at=WHEN, answered=True)))  # fmt: skip
        await backend.write(alice, new)
        got = await backend.get(alice, new.id)
        assert got is not None and got.provenance is not None
        assert got.provenance.model == "m\ufffdx" and got.provenance.received_at == WHEN
    finally:
        await backend.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        versions = dict(conn.execute("SELECT component, version FROM dmt_schema_version"))
    assert versions == {"memory": MEMORY_SCHEMA_VERSION} and MEMORY_SCHEMA_VERSION == 2


async def test_embedding_dimension_mismatch_is_refused(
    tmp_path: Path, embedder: LocalEmbedder, pg_dsn: str
) -> None:
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    await backend.close()
    with pytest.raises(ConfigError, match="384-dimensional embeddings but the embedder makes 8"):
        await create_backend("postgres", config(tmp_path, TinyEmbedder(), dsn=pg_dsn))


async def test_audit_update_keeps_text_and_embedding(
    tmp_path: Path, embedder: LocalEmbedder, pg_dsn: str
) -> None:
    """The audit touches the audit columns only: no re-embedding, the text as written."""
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    alice = Scope(user="tenant-a/alice", agent="planner")
    record = MemoryRecord.from_interaction(alice, "My dog is named Rex.", "Nice.")
    await backend.write(alice, record)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        before = conn.execute("SELECT embedding::text FROM dmt_memories").fetchone()
        await backend.update(alice, record.id, audit_status=AuditStatus.TAGGED, tag=TAG)
        after = conn.execute(
            "SELECT embedding::text, tag->>'bias_type' FROM dmt_memories"
        ).fetchone()
    assert before is not None and after is not None
    assert after[0] == before[0] and after[1] == "age"
    with pytest.raises(ValueError):  # a tagged status without a tag is refused, as everywhere
        await backend.update(alice, record.id, audit_status=AuditStatus.TAGGED, tag=None)
    await backend.close()


async def test_nul_characters_are_stored_not_retried_forever(
    tmp_path: Path, embedder: LocalEmbedder, pg_dsn: str
) -> None:
    """PostgreSQL text cannot hold NUL; such a write is stored with U+FFFD instead of failing."""
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=pg_dsn))
    alice = Scope(user="alice")
    record = MemoryRecord.from_interaction(alice, "zero\x00byte", "ok", metadata={"k": "a\x00b"})
    await backend.write(alice, record)
    [stored] = await backend.list(alice)
    assert stored.query == "zero\ufffdbyte" and stored.metadata == {"k": "a\ufffdb"}
    await backend.close()


async def test_lost_server_is_a_store_error_and_the_pool_recovers(
    tmp_path: Path, embedder: LocalEmbedder, pg_cluster: PgCluster
) -> None:
    """Connections the server dropped fail one call as MemoryStoreError, then are replaced."""
    dsn = pg_cluster.create_database()
    backend = await create_backend("postgres", config(tmp_path, embedder, dsn=dsn))
    alice = Scope(user="alice")
    await backend.write(alice, MemoryRecord.from_interaction(alice, "Kept.", "ok"))
    dbname = dsn.rsplit("/", 1)[1]
    pg_cluster.execute(
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{dbname}'"
    )
    try:
        listed = await backend.list(alice)  # the pool's check replaces the dead connection
    except MemoryStoreError:
        listed = await backend.list(alice)
    assert [r.text for r in listed] == ["User: Kept.\nAssistant: ok"]
    await backend.close()
    with pytest.raises(MemoryStoreError):
        await backend.list(alice)
