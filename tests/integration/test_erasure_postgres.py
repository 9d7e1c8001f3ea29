"""Erasure and export on PostgreSQL: a real proxy process whose memories, outbox and review
trail are in a throwaway PostgreSQL (``dmt_proxy.testing.pg``), with its local spool.

As ``test_erasure.py`` does for mem0 and SQLite: a unique string written for one user
through the chat API, the admin API and MCP, audited and reviewed, then
``DELETE /v1/memories?user=U``; afterwards no text, JSON or bytea column of any table of
the database holds it (nor the planner's statistics, ``pg_stats``), and no file under the
proxy's state directory (its spool). A second user, erased by ``dmt-proxy erase
--vacuum-full`` beside the running proxy, shows that a full vacuum leaves no byte of
either user in the database's files either; the server's write-ahead log (``pg_wal``),
which no client can clear, is left out of that scan. The agent and the auditor are the
shipped fake upstream: what is under test is where text is kept, not a model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmt_proxy.testing.pg import PgCluster
from tests.integration.test_erasure import (
    Deployment,
    check_tombstones,
    export,
    files_with,
    memories,
    unique,
    write_everywhere,
)
from tests.integration.test_erasure import deploy as deploy  # a fixture
from tests.proxy_process import ADMIN, proxy_env

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


def database_rows_with(dsn: str, text: str) -> list[str]:
    """``table.column`` for every text, JSON or bytea value of every table of the database
    (and every row of ``pg_stats``) that holds ``text``."""
    import psycopg
    from psycopg import sql

    found: list[str] = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        columns = conn.execute(
            "SELECT table_schema, table_name, column_name, data_type FROM information_schema.columns"
            " WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            " AND data_type IN ('text', 'character varying', 'character', 'json', 'jsonb', 'bytea')"
        ).fetchall()
        for schema, table, column, kind in columns:
            value = sql.Identifier(column)
            if kind == "bytea":
                test = sql.SQL("position(%s::bytea in {}) > 0").format(value)
                arg: Any = text.encode("utf-8")
            else:
                test = sql.SQL("strpos({}::text, %s) > 0").format(value)
                arg = text
            query = sql.SQL("SELECT count(*) FROM {}.{} WHERE {}").format(
                sql.Identifier(schema), sql.Identifier(table), test
            )
            row = conn.execute(query, [arg]).fetchone()
            if row and row[0]:
                found.append(f"{table}.{column}")
        stats = conn.execute(
            "SELECT count(*) FROM pg_stats WHERE strpos(pg_stats::text, %s) > 0", [text]
        ).fetchone()
        if stats and stats[0]:
            found.append("pg_stats")
    return found


def analyze(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("ANALYZE")


def relations(dsn: str, files: list[str]) -> list[Any]:
    """The relations whose data files are ``files`` (for a failure's message)."""
    import psycopg

    nodes = [int(f.rsplit("/", 1)[-1].split(".")[0].split("_")[0]) for f in files]
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT relname, relkind FROM pg_class WHERE relfilenode = ANY(%s)", (nodes,)
        ).fetchall()


def cluster_files_with(cluster: PgCluster, text: str) -> list[str]:
    """Files of the cluster's data directory holding ``text``, the WAL left out."""
    cluster.execute("CHECKPOINT")  # dirty pages reach the files
    needle = text.encode("utf-8")
    return [
        str(p.relative_to(cluster.data)) for p in sorted(cluster.data.rglob("*"))
        if p.is_file() and "pg_wal" not in p.parts and needle in p.read_bytes()
    ]  # fmt: skip


def test_erasing_a_user_on_postgres(
    deploy: Any, pg_cluster: PgCluster, pg_dsn: str, tmp_path: Path
) -> None:
    d: Deployment = deploy("postgres", DMT_DATABASE_URL=pg_dsn)
    state = d.proxy.state_dir
    secret, other, third = unique(), unique(), unique()
    ids = write_everywhere(d, "alice", secret)
    bob = write_everywhere(d, "bob", other)
    carol = write_everywhere(d, "carol", third)

    before = export(d, "alice")
    assert sorted(m["id"] for m in before["memories"]) == sorted(ids)
    assert all(m["tag"]["bias_type"] == "gender" for m in before["memories"])
    assert other not in json.dumps(before) and third not in json.dumps(before)
    held = database_rows_with(pg_dsn, secret)
    assert {"dmt_memories.text", "dmt_review_trail.reason"} <= set(held), held
    # What autovacuum may do at any time: sample the live rows, every user's text among
    # them, into the planner's statistics (an erasure must clear those too).
    analyze(pg_dsn)

    resp = httpx.delete(f"{d.base}/memories", params={"user": "alice"}, headers=ADMIN, timeout=120)
    assert resp.status_code == 200, resp.text
    erasure = resp.json()["erasure"]
    assert (erasure["memories"], erasure["tombstones"]) == (3, len(before["trail"]))
    vacuumed = {name.rsplit("/", 1)[-1] for name in erasure["compacted"]
                if name.startswith("postgresql:")}  # fmt: skip
    assert vacuumed == {"dmt_memories", "dmt_outbox", "dmt_review_trail", "pg_statistic"}
    assert any("write-ahead log" in k for k in erasure["kept"])  # said, not hidden
    assert database_rows_with(pg_dsn, secret) == []
    assert files_with(state, secret) == []  # the spool
    check_tombstones(export(d, "alice"), ids, len(before["trail"]))
    assert sorted(m["id"] for m in memories(d, "bob")) == sorted(bob)
    assert "dmt_memories.text" in database_rows_with(pg_dsn, other)

    # Beside the running proxy (a shared database): the command, with a full vacuum.
    events = len(export(d, "carol")["trail"])
    done = subprocess.run(
        [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "--state-dir", str(tmp_path / "cli"),
         "erase", "--user", "carol", "--vacuum-full", "--policy", str(d.policy)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **proxy_env(DMT_DATABASE_URL=pg_dsn)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["memories"] == 3
    check_tombstones(export(d, "carol"), carol, events)
    assert database_rows_with(pg_dsn, third) == []
    left = cluster_files_with(pg_cluster, third)
    assert left == [], (
        left,
        relations(pg_dsn, left),
        done.stdout,
    )  # VACUUM FULL: no byte in the tables'
    assert cluster_files_with(pg_cluster, secret) == []  # files (alice's are rewritten too)
    assert cluster_files_with(pg_cluster, other) != []  # while bob's memories are there


async def test_a_version_1_postgres_trail_is_migrated_and_keeps_its_guard(pg_dsn: str) -> None:
    """A trail table written by the release before tombstones: opened, it gains
    ``erased_at`` and the one allowed update; every other change is still refused."""
    import psycopg

    from dmt_proxy.database import migrate
    from dmt_proxy.memory.write import pg_trail
    from dmt_proxy.memory.write.trail import machine_event, now_utc

    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        v1 = {1: pg_trail._steps("old_")[1]}  # the layout the previous release wrote
        await migrate(conn, prefix="old_", component="review_trail", steps=v1, what="test")
        await conn.execute(
            "INSERT INTO old_review_trail (memory_id, user_id, at, actor, human, action,"
            " after_status, reason, evidence, format_version) VALUES"
            " ('mem_a', 'alice', 1.5, 'auditor:x', 0, 'machine', 'tagged', 'why', '{}', 1)"
        )
    trail = await pg_trail.PostgresTrail.open(pg_dsn, prefix="old_")
    try:
        await trail.append(machine_event("mem_b", "bob", auditor="x", after_status="clean",
                                         after_domain=None, reason="fine", evidence={}))  # fmt: skip
        assert await trail.erase_user("alice", now_utc()) == 1
        (tomb,) = await trail.of_user("alice")
        assert (tomb.reason, tomb.evidence, tomb.after_status) == ("", None, "tagged")
        assert tomb.erased_at is not None
        assert (await trail.of_user("bob"))[0].reason == "fine"
    finally:
        await trail.aclose()
    async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as conn:
        for statement in (
            "UPDATE old_review_trail SET actor = 'x'",
            "UPDATE old_review_trail SET erased_at = NULL WHERE user_id = 'alice'",
            "UPDATE old_review_trail SET erased_at = 1, reason = '' WHERE user_id = 'bob'",
            "DELETE FROM old_review_trail",
            "TRUNCATE old_review_trail",
        ):
            with pytest.raises(psycopg.errors.RaiseException, match="append-only"):
                await conn.execute(statement)
        version = await (await conn.execute(
            "SELECT version FROM old_schema_version WHERE component = 'review_trail'")).fetchone()  # fmt: skip
        assert version == (2,)
