"""Erasure and export in process: the SQLite compaction, the trail's tombstones, the worker's
cancelled rows, and ``DELETE /v1/memories?user=U`` / ``GET /v1/admin/export`` with the
``dmt-proxy erase`` and ``export`` commands over the shipped in-memory backend.

The real SQLite outbox and trail; the shipped in-memory backend (with its snapshot file)
and ScriptedAuditor/ScriptedChatModel (fakes: these tests are about where text is kept
and removed, not about a model's judgement). mem0 and PostgreSQL, through a real proxy
process: ``tests/integration/test_erasure.py`` and ``test_erasure_postgres.py``.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import sqlite3
import string
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.cli import proxy_cli
from dmt_proxy.exchange import Exchange
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope
from dmt_proxy.memory.write.outbox import SqliteOutbox
from dmt_proxy.memory.write.storage import compact_sqlite
from dmt_proxy.memory.write.trail import (
    _SCHEMA_V1,
    SqliteTrail,
    TrailEvent,
    machine_event,
    now_utc,
)
from dmt_proxy.memory.write.worker import OutboxWorker
from dmt_proxy.metrics import Metrics
from dmt_proxy.modes import Mode
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.app import InProcessApp, app_client
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel

ADMIN = {"authorization": "Bearer admin-key"}
POLICY = {"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
          "audit": {"first_stage": "off"}}  # fmt: skip


def unique() -> str:
    """A string found nowhere else: lower-case letters only, so no normalisation of the
    auditor (which turns digits into the letters they disguise) changes it."""
    return "zq" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(22))


def hits(root: Path, text: str) -> list[str]:
    """Every file under ``root`` holding the UTF-8 bytes of ``text``."""
    needle = text.encode("utf-8")
    return [str(p) for p in sorted(root.rglob("*")) if p.is_file() and needle in p.read_bytes()]


def quoting(secret: str) -> Any:
    """A judge that tags every memory and quotes the user's words in its rationale."""

    def judge(candidate: AuditCandidate) -> AuditVerdict:
        return AuditVerdict.biased("gender", score=0.9, target_group="women",
                                   tendency="bad at math",
                                   rationale=f"says women are bad at math: {candidate.text}",
                                   auditor="scripted@fake")  # fmt: skip

    assert secret
    return judge


def test_compact_removes_deleted_text_from_the_file_and_its_wal(tmp_path: Path) -> None:
    """Whatever the SQLite build's ``secure_delete`` default: without it a deleted row's
    bytes stay in the file and the WAL; after ``compact_sqlite`` they are gone."""
    secret, path = unique(), tmp_path / "db.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA secure_delete=OFF")
        conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        conn.executemany("INSERT INTO t (body) VALUES (?)",
                         [(f"{secret} {i} " + "x" * 300,) for i in range(40)]
                         + [("kept " + "y" * 300,) for _ in range(40)])  # fmt: skip
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # the rows reach the main file too
        conn.execute("DELETE FROM t WHERE body LIKE ?", (f"{secret}%",))
        assert hits(tmp_path, secret) != []  # the proof that the test means something
        compact_sqlite(conn, path)
        assert hits(tmp_path, secret) == []
        assert conn.execute("SELECT COUNT(*) FROM t").fetchone()[0] == 40
        assert (tmp_path / "db.sqlite3-wal").stat().st_size == 0


def _event(user: str, memory_id: str, secret: str) -> TrailEvent:
    return machine_event(memory_id, user, auditor="scripted@fake", after_status="tagged",
                         after_domain="gender", reason=f"quoted: {secret}",
                         evidence={"verdict": {"rationale": secret}})  # fmt: skip


async def test_the_trail_keeps_a_tombstone_and_refuses_any_other_change(tmp_path: Path) -> None:
    secret, path = unique(), tmp_path / "outbox.sqlite3"
    trail = SqliteTrail(path)
    try:
        mine = await trail.append(_event("alice", "mem_a", secret))
        await trail.append(_event("alice2", "mem_b", secret))  # a user whose name extends it
        at = now_utc()
        assert await trail.erase_user("alice", at) == 1
        assert await trail.erase_user("alice", now_utc()) == 0  # already a tombstone
        (tomb,) = await trail.of_user("alice")
        assert tomb == mine.model_copy(update={"reason": "", "evidence": None, "erased_at": at})
        (other,) = await trail.of_user("alice2")
        assert other.erased_at is None and secret in other.reason
    finally:
        await trail.aclose()
    with closing(sqlite3.connect(path)) as db:
        for statement in (
            "UPDATE review_trail SET actor = 'x'",  # a live row's column
            "UPDATE review_trail SET erased_at = NULL WHERE user_id = 'alice'",  # un-erase
            "UPDATE review_trail SET after_status = 'clean' WHERE user_id = 'alice'",
            "UPDATE review_trail SET erased_at = 1, reason = '' WHERE user_id = 'alice2'",  # evidence kept
            "DELETE FROM review_trail WHERE user_id = 'alice'",
        ):
            with pytest.raises(sqlite3.IntegrityError, match="append-only"):
                db.execute(statement)


async def test_a_version_1_trail_file_is_migrated(tmp_path: Path) -> None:
    """A trail written by the release before tombstones opens, keeps its events, erases."""
    path = tmp_path / "outbox.sqlite3"
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        for statement in _SCHEMA_V1:
            db.execute(statement)
        db.execute("INSERT INTO review_trail_schema VALUES (1)")
        db.execute(
            "INSERT INTO review_trail (memory_id, user_id, at, actor, human, action,"
            " after_status, reason, evidence, format_version) VALUES"
            " ('mem_a', 'alice', 1.5, 'auditor:x', 0, 'machine', 'tagged', 'why', '{}', 1)"
        )
    trail = SqliteTrail(path)
    try:
        assert trail.found_version == 1
        (event,) = await trail.of_user("alice")
        assert event.reason == "why" and event.erased_at is None
        assert await trail.erase_user("alice", now_utc()) == 1
        assert (await trail.of_user("alice"))[0].reason == ""
    finally:
        await trail.aclose()
    with closing(sqlite3.connect(path)) as db:
        assert db.execute("SELECT version FROM review_trail_schema").fetchall() == [(2,)]


async def test_a_row_cancelled_in_progress_leaves_no_record_and_no_trail_event(
    tmp_path: Path,
) -> None:
    """The worker finds its row gone (an erasure or a deletion elsewhere) when it comes to
    mark it stored, or to save its verdict: it removes what it stored and stops."""
    policy = parse_policy(POLICY)
    outbox, trail, backend = (SqliteOutbox(tmp_path / "outbox.sqlite3"),
                              SqliteTrail(tmp_path / "outbox.sqlite3"), InMemoryBackend())  # fmt: skip
    worker = OutboxWorker(outbox=outbox, backend=backend, backend_name="memory",
                          auditor=ScriptedAuditor(), policy=policy.audit, metrics=Metrics(),
                          trail=trail)  # fmt: skip
    alice = Scope(user="alice")
    try:
        for stage in ("before storing", "during the audit"):
            await outbox.enqueue(Exchange(scope=alice, query=f"hello {stage}", answer="hi",
                                          request_id="r", mode=Mode.DMT))  # fmt: skip
            (item,) = await outbox.due()
            if stage == "during the audit":
                assert await outbox.mark_stored(item.id)
                await backend.write(alice, item.record(AuditStatus.PENDING))
                item = (await outbox.pending())[0]
            await outbox.cancel(item.id)
            await worker.process(item)
            assert await backend.list(alice) == [], stage
            assert await trail.of_user("alice") == [], stage
            await outbox.done(item.id)  # release it from the outbox's hands
    finally:
        await outbox.aclose()
        await trail.aclose()


@asynccontextmanager
async def proxy(state: Path, auditor: ScriptedAuditor) -> AsyncIterator[InProcessApp]:
    settings = Settings.from_env({}, state_dir=state, admin_key="admin-key")
    # The policy's own backend (persisting its snapshot under the state dir), not a fake.
    async with app_client(settings, policy=POLICY, upstream=ScriptedChatModel(["noted"]),
                          auditor=auditor) as app:  # fmt: skip
        yield app


async def _seed(app: InProcessApp, user: str, query: str) -> str:
    resp = await app.client.post("/v1/memories", json={"user": user, "query": query},
                                 headers=ADMIN)  # fmt: skip
    assert resp.status_code == 200, resp.text
    assert await app.memory.drain(timeout_s=30)
    return str(resp.json()["id"])


async def test_delete_user_erases_everywhere_and_export_answers_all(tmp_path: Path) -> None:
    secret, state = unique(), tmp_path / "state"
    async with proxy(state, ScriptedAuditor(quoting(secret))) as app:  # closing writes the snapshot
        mine = await _seed(app, "alice", f"Women are bad at math, says {secret}.")
        theirs = await _seed(app, "bob", "Bob likes green tea.")
    assert hits(state, secret) != []  # snapshot and trail hold it: the test means something
    async with proxy(state, ScriptedAuditor(quoting(secret))) as app:
        exported = (await app.client.get("/v1/admin/export", params={"user": "alice"},
                                         headers=ADMIN)).json()  # fmt: skip
        assert exported["object"] == "user_export" and exported["version"] == 1
        assert [m["id"] for m in exported["memories"]] == [mine]
        (memory,) = exported["memories"]
        assert memory["tag"]["bias_type"] == "gender" and secret in memory["query"]
        assert memory["stored"] is True
        provenance = memory["provenance"]
        assert (provenance["channel"], provenance["query_by"]) == ("admin", "operator")
        assert memory["metadata"]["request_id"] == provenance["request_id"]  # the admin request
        assert [e["memory_id"] for e in exported["trail"]] == [mine]
        assert secret in json.dumps(exported["trail"][0]["evidence"])
        assert "bob" not in json.dumps(exported) and theirs not in json.dumps(exported)

        resp = await app.client.delete("/v1/memories", params={"user": "alice"}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        answer = resp.json()
        assert (answer["user"], answer["deleted"], answer["object"]) == ("alice", 1, "list")
        erasure = answer["erasure"]
        assert (erasure["memories"], erasure["tombstones"], erasure["kept"]) == (1, 1, [])
        assert str(state / "outbox.sqlite3") in erasure["compacted"]
        assert str(state / "memory" / "memory" / "snapshot.json") in erasure["compacted"]
        assert hits(state, secret) == []  # while the proxy runs: WAL and snapshot included

        after = (await app.client.get("/v1/admin/export", params={"user": "alice"},
                                      headers=ADMIN)).json()  # fmt: skip
        assert after["memories"] == [] and after["outbox"] == []
        (tomb,) = after["trail"]
        assert (tomb["memory_id"], tomb["after_status"], tomb["after_domain"]) == (
            mine, "tagged", "gender")  # fmt: skip
        assert tomb["reason"] == "" and tomb["evidence"] is None and tomb["erased_at"]
        detail = await app.client.get(f"/v1/memories/{mine}/evidence",
                                      headers={**ADMIN, "x-dmt-reviewer": "rita"})  # fmt: skip
        assert detail.status_code == 404  # the console has nothing of it to show
        bob = (await app.client.get("/v1/memories", params={"user": "bob"},
                                    headers=ADMIN)).json()["data"]  # fmt: skip
        assert [m["id"] for m in bob] == [theirs]
    assert hits(state, secret) == []


async def test_an_erasure_stops_the_users_writes_in_progress(tmp_path: Path) -> None:
    """A write of the user being audited when the erasure comes is stopped, not stored after."""
    secret = unique()
    async with proxy(tmp_path / "state", ScriptedAuditor(delay_s=300)) as app:
        resp = await app.client.post("/v1/memories", json={"user": "alice", "query": secret},
                                     headers=ADMIN)  # fmt: skip
        mid = resp.json()["id"]
        async with asyncio.timeout(30):  # stored (pending), now in the auditor's hands
            while not (await app.memory.get(mid)) or mid not in str(app.memory._worker._users):
                await asyncio.sleep(0.02)
        erasure = (await app.client.delete("/v1/memories", params={"user": "alice"},
                                           headers=ADMIN)).json()["erasure"]  # fmt: skip
        assert erasure["abandoned"] == 1 and erasure["kept"] == []
        assert await app.memory.get(mid) is None
        assert (await app.memory.export("alice")).trail == []
    assert hits(tmp_path / "state", secret) == []


def test_the_erase_and_export_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``dmt-proxy export`` and ``erase`` on a state directory no proxy runs on."""
    secret, state = unique(), tmp_path / "state"
    policy = tmp_path / "policy.yaml"
    policy.write_text(json.dumps(POLICY), encoding="utf-8")  # JSON is YAML

    async def seed() -> None:
        async with proxy(state, ScriptedAuditor(quoting(secret))) as app:
            await _seed(app, "alice", f"Women are bad at math, says {secret}.")
            await _seed(app, "bob", "Bob likes green tea.")

    asyncio.run(seed())
    base = ["--state-dir", str(state)]
    out = tmp_path / "alice.json"
    assert proxy_cli.main([*base, "export", "--user", "alice", "--out", str(out),
                           "--policy", str(policy)]) == 0  # fmt: skip
    document = json.loads(out.read_text(encoding="utf-8"))
    assert [m["user"] for m in document["memories"]] == ["alice"]
    assert len(document["trail"]) == 1 and "Bob" not in out.read_text(encoding="utf-8")
    out.unlink()
    capsys.readouterr()
    assert proxy_cli.main([*base, "erase", "--user", "alice", "--policy", str(policy)]) == 0
    erasure = json.loads(capsys.readouterr().out)
    assert (erasure["memories"], erasure["tombstones"], erasure["kept"]) == (1, 1, [])
    assert hits(state, secret) == []
    assert proxy_cli.main([*base, "export", "--user", "bob", "--policy", str(policy)]) == 0
    assert [m["user"] for m in json.loads(capsys.readouterr().out)["memories"]] == ["bob"]
    assert proxy_cli.main([*base, "erase", "--user", " ", "--policy", str(policy)]) == 2
    assert "invalid --user" in capsys.readouterr().err


def test_a_tombstone_is_made_once() -> None:
    event = machine_event("m", "u", auditor="a", after_status="clean", after_domain=None,
                          reason="r", evidence={})  # fmt: skip
    at = datetime(2026, 1, 2, tzinfo=UTC)
    tomb = event.tombstone(at)
    assert (tomb.erased_at, tomb.reason, tomb.evidence) == (at, "", None)
    assert tomb.tombstone(now_utc()) == tomb
