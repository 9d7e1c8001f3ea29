"""Erasure and export on a real proxy process with the real mem0 backend (Qdrant on disk,
mem0's history DB) and the SQLite outbox and review trail.

A unique string is written for one user through every channel: a chat request, the
admin ``POST /v1/memories`` and MCP's ``add_memory``; the worker stores and audits them
(the auditor quotes the user's words back: the tag's grounded text and the trail's
evidence carry them), and a reviewer's reason quotes it too; a second user writes their
own. After ``DELETE /v1/memories?user=U`` no file under the state directory holds the
string's UTF-8 bytes, nor any column of any table of any SQLite file there, while the
proxy runs (WAL files included) and after it stops; the other user's memories are
intact; the trail keeps a tombstone of each of the user's decisions. ``dmt-proxy erase``
and ``export`` do the same on a stopped proxy's state directory.

The agent and the auditor are the shipped fake upstream (``dmt_proxy.testing``): they
answer instantly with a canned reply and a canned verdict. What is under test is where
text is kept and removed, not a model's answer or judgement.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import string
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client
from mcp.types import TextContent

from tests.proxy_process import (
    ADMIN,
    FakeUpstream,
    ProxyProcess,
    proxy_env,
    wait_outbox_empty,
    write_policy,
)

VERDICT = json.dumps(
    {"rationale": "It generalises about women.", "bias_detected": True, "bias_type": "gender",
     "target_group": "women", "tendency": "bad at math", "score": 0.9}
)  # fmt: skip
"""The fake auditor's verdict on every memory: a gender tag, grounded in the memory's own
sentence that names women (so the tag and the trail's evidence quote the user's words)."""


def unique() -> str:
    """A string found nowhere else; letters only, so the auditor's normalisation (which
    reads digits as the letters they disguise) leaves it as it is."""
    return "zq" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(22))


@dataclass
class Deployment:
    """A proxy with a fake agent and a fake auditor."""

    proxy: ProxyProcess
    fakes: tuple[FakeUpstream, ...]
    policy: Path

    @property
    def base(self) -> str:
        return self.proxy.base_url

    @property
    def mcp(self) -> str:
        return f"http://127.0.0.1:{self.proxy.port}/mcp"

    def stop(self) -> None:
        self.proxy.stop()
        for fake in self.fakes:
            fake.stop()


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[Any]:
    started: list[Deployment] = []

    def start(backend: str, **env: str) -> Deployment:
        agent = FakeUpstream(args=("--answer", "Noted.")).start()
        judge = FakeUpstream(args=("--answer", VERDICT)).start()
        policy = write_policy(tmp_path / "policy.yaml", models={"agent": agent, "judge": judge},
                              default_model="agent", backend=backend,
                              audit={"auditor_model": "judge"})  # fmt: skip
        proxy = ProxyProcess(state_dir=tmp_path / "state", env=proxy_env(**env))
        deployment = Deployment(proxy, (agent, judge), policy)
        started.append(deployment)
        proxy.start("--policy", str(policy))
        return deployment

    yield start
    for deployment in started:
        deployment.stop()


async def _mcp_add(url: str, user: str, text: str) -> str:
    async with Client(url) as client:
        result = await client.call_tool("add_memory", {"text": text, "user_id": user})
    blocks = [b.text for b in result.content if isinstance(b, TextContent)]
    assert not result.is_error, blocks
    return str(json.loads(blocks[-1])["results"][0]["id"])


def write_everywhere(d: Deployment, user: str, secret: str) -> list[str]:
    """One memory of ``user`` naming ``secret`` through each channel, stored and audited;
    a reviewer's reason quotes it too. The memory ids."""
    chat = httpx.post(f"{d.base}/chat/completions", timeout=60, json={
        "model": "agent", "user": user,
        "messages": [{"role": "user", "content": f"Women are bad at math, {secret} says."}]})  # fmt: skip
    assert chat.status_code == 200, chat.text
    admin = httpx.post(f"{d.base}/memories", headers=ADMIN, timeout=60, json={
        "user": user, "query": f"Women drive badly, {secret} thinks."})  # fmt: skip
    assert admin.status_code == 200, admin.text
    tool = asyncio.run(_mcp_add(d.mcp, user, f"Women cannot cook, {secret} claims."))
    wait_outbox_empty(d.base, 120)
    ids = [m["id"] for m in memories(d, user)]
    assert len(ids) == 3 and admin.json()["id"] in ids and tool in ids
    review = httpx.post(f"{d.base}/memories/{ids[0]}/review", timeout=60,
                        headers={**ADMIN, "x-dmt-reviewer": "rita"},
                        json={"action": "confirm", "reason": f"{secret} said so"})  # fmt: skip
    assert review.status_code == 200, review.text
    return ids


def memories(d: Deployment, user: str) -> list[dict[str, Any]]:
    resp = httpx.get(f"{d.base}/memories", params={"user": user}, headers=ADMIN, timeout=60)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["data"])


def export(d: Deployment, user: str) -> dict[str, Any]:
    resp = httpx.get(f"{d.base}/admin/export", params={"user": user}, headers=ADMIN, timeout=60)
    assert resp.status_code == 200, resp.text
    document: dict[str, Any] = resp.json()
    return document


def files_with(root: Path, text: str) -> list[str]:
    """Every file under ``root`` holding the UTF-8 bytes of ``text``."""
    needle = text.encode("utf-8")
    return [str(p.relative_to(root)) for p in sorted(root.rglob("*"))
            if p.is_file() and needle in p.read_bytes()]  # fmt: skip


def _holds(value: Any, needle: bytes) -> bool:
    if isinstance(value, str):
        return needle in value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return needle in bytes(value)
    return False


def sqlite_rows_with(root: Path, text: str) -> list[str]:
    """``file:table.column`` for every value of every table of every SQLite file under
    ``root`` that holds ``text`` (read through SQLite, not as bytes: the logical view)."""
    needle, found = text.encode("utf-8"), []
    for path in sorted(root.rglob("*")):
        if not path.is_file() or path.read_bytes()[:16] != b"SQLite format 3\x00":
            continue
        with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
            for table in tables:
                cur = db.execute(f'SELECT * FROM "{table}"')
                names = [c[0] for c in cur.description]
                for row in cur:
                    found += [f"{path.relative_to(root)}:{table}.{n}"
                              for n, v in zip(names, row, strict=True) if _holds(v, needle)]  # fmt: skip
    return found


def check_tombstones(document: dict[str, Any], ids: list[str], events_before: int) -> None:
    """The user's trail is tombstones only, one per event it had, of their memories."""
    trail = document["trail"]
    assert len(trail) == events_before and {e["memory_id"] for e in trail} == set(ids)
    assert all(e["erased_at"] and e["reason"] == "" and e["evidence"] is None for e in trail)
    assert {e["actor"] for e in trail} >= {"reviewer:rita"}  # who decided is kept
    assert document["memories"] == [] and document["outbox"] == []


@pytest.mark.slow
def test_erasing_a_user_leaves_no_byte_of_their_text(deploy: Any) -> None:
    d: Deployment = deploy("mem0")
    state = d.proxy.state_dir
    secret, other = unique(), unique()
    ids = write_everywhere(d, "alice", secret)
    bob = write_everywhere(d, "bob", other)

    before = export(d, "alice")  # the export: everything of alice, nothing of bob
    assert sorted(m["id"] for m in before["memories"]) == sorted(ids)
    assert all(m["tag"]["bias_type"] == "gender" and m["audit_status"] == "tagged"
               for m in before["memories"])  # fmt: skip
    # Each with the provenance the proxy stamped (mem0 keeps it in its metadata).
    assert {m["provenance"]["channel"] for m in before["memories"]} == {"chat", "admin", "mcp"}
    assert {e["memory_id"] for e in before["trail"]} == set(ids)
    assert any(secret in (e["reason"] or "") for e in before["trail"])
    assert secret in json.dumps(before) and other not in json.dumps(before)
    assert not set(bob) & {m["id"] for m in before["memories"]}
    # Where the text was before: the test means something.
    held = files_with(state, secret)
    assert "memory/mem0/history.db" in held and any("qdrant" in f for f in held), held
    assert any(f.startswith("outbox.sqlite3") for f in held), held

    resp = httpx.delete(f"{d.base}/memories", params={"user": "alice"}, headers=ADMIN, timeout=120)
    assert resp.status_code == 200, resp.text
    answer = resp.json()
    assert (answer["deleted"], answer["erasure"]["memories"]) == (3, 3)
    assert answer["erasure"]["tombstones"] == len(before["trail"])
    assert answer["erasure"]["kept"] == []

    assert files_with(state, secret) == []  # the proxy still runs: WAL files included
    assert sqlite_rows_with(state, secret) == []
    check_tombstones(export(d, "alice"), ids, len(before["trail"]))
    assert sorted(m["id"] for m in memories(d, "bob")) == sorted(bob)  # the other user is intact
    assert other in json.dumps(export(d, "bob"))
    assert "memory/mem0/history.db" in files_with(state, other)

    d.proxy.stop()  # shutdown checkpoints the WAL: still nothing
    assert files_with(state, secret) == [] and sqlite_rows_with(state, secret) == []


def _cli(state: Path, policy: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "--state-dir", str(state), *args,
         "--policy", str(policy)],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **proxy_env()},
    )  # fmt: skip


@pytest.mark.slow
def test_the_erase_and_export_commands_on_a_stopped_proxy(deploy: Any, tmp_path: Path) -> None:
    d: Deployment = deploy("mem0")
    state = d.proxy.state_dir
    secret, other = unique(), unique()
    ids = write_everywhere(d, "alice", secret)
    bob = write_everywhere(d, "bob", other)
    events = len(export(d, "alice")["trail"])
    d.proxy.stop()  # Qdrant's local mode: one process per state directory

    out = tmp_path / "alice.json"
    done = _cli(state, d.policy, "export", "--user", "alice", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text(encoding="utf-8"))
    assert sorted(m["id"] for m in document["memories"]) == sorted(ids)
    assert len(document["trail"]) == events
    assert other not in out.read_text(encoding="utf-8")
    out.unlink()  # the test's own copy of the text

    done = _cli(state, d.policy, "erase", "--user", "alice")
    assert done.returncode == 0, done.stderr[-3000:]
    erasure = json.loads(done.stdout)
    assert (erasure["memories"], erasure["tombstones"], erasure["kept"]) == (3, events, [])
    assert files_with(state, secret) == [] and sqlite_rows_with(state, secret) == []

    done = _cli(state, d.policy, "export", "--user", "alice")
    assert done.returncode == 0, done.stderr[-3000:]
    check_tombstones(json.loads(done.stdout), ids, events)
    done = _cli(state, d.policy, "export", "--user", "bob")
    assert sorted(m["id"] for m in json.loads(done.stdout)["memories"]) == sorted(bob)
