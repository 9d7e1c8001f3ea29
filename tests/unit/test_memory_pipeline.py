"""The proxy's memory flow in-process: retrieval, DMT rendering, durable write-behind, admin API.

The upstream is the shipped ScriptedChatModel and the auditor the shipped
ScriptedAuditor (fakes: these tests are about the proxy's flow, not the models'
judgement; the real-model versions are in tests/e2e). The memory backend is the
shipped in-memory backend, a real implementation of the protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus, BiasTag, Finding, FindingKind
from dmt_proxy.testing.app import InProcessApp
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.fixtures import OpenApp
from tests.timing import budget

URL = "/v1/chat/completions"
ADMIN = {"authorization": "Bearer sekrit"}
BIASED = "Older engineers never keep up, so explain recursion simply for my team of boomers."


def verdict_for(candidate: AuditCandidate) -> AuditVerdict:
    if "boomer" in candidate.text.lower() or "older" in candidate.text.lower():
        return AuditVerdict.biased("age", score=0.9, target_group="older workers",
                                   tendency="against older engineers", rationale="age stereotype")  # fmt: skip
    return AuditVerdict.clean(rationale="neutral")


@dataclass
class Env:
    proxy: InProcessApp
    chat: ScriptedChatModel
    auditor: ScriptedAuditor
    backend: InMemoryBackend

    @property
    def client(self) -> httpx.AsyncClient:
        return self.proxy.client

    async def drain(self) -> None:
        # A hang guard: the first audit loads the first stage's embedding model (seconds
        # from a cold disk cache).
        assert await self.proxy.memory.drain(timeout_s=budget(60))

    def ask(self, text: str, user: str = "alice", **headers: str) -> Any:
        body = {
            "model": "local/smollm2",
            "messages": [{"role": "user", "content": text}],
            "user": user,
        }
        return self.client.post(URL, json=body, headers=headers)


def make_policy(**audit: Any) -> Any:
    # The scripted auditor decides every write (the trained judge beside it is not under test).
    return parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory", "top_k": 5},
                         "audit": {"tau": 0.5, "first_stage": "off", **audit}})  # fmt: skip


@pytest.fixture
async def env(state_dir: Path, request: pytest.FixtureRequest, open_app: OpenApp) -> Env:
    audit = getattr(request, "param", {})
    settings = Settings.from_env({}, state_dir=state_dir, admin_key="sekrit")
    chat = ScriptedChatModel(["The answer is 42."])
    auditor = ScriptedAuditor(verdict_for)
    backend = InMemoryBackend()
    proxy = await open_app(settings, policy=make_policy(**audit), upstream=chat,
                           memory_backend=backend, auditor=auditor)  # fmt: skip
    return Env(proxy, chat, auditor, backend)


async def memories(env: Env, user: str = "alice") -> list[dict[str, Any]]:
    resp = await env.client.get("/v1/memories", params={"user": user}, headers=ADMIN)
    assert resp.status_code == 200, resp.text
    return list(resp.json()["data"])


async def test_biased_write_is_tagged_and_neutral_is_clean(env: Env) -> None:
    assert (await env.ask(BIASED)).status_code == 200
    assert (await env.ask("What is the boiling point of water at sea level?")).status_code == 200
    await env.drain()
    rows = await memories(env)
    by_status = {r["audit_status"]: r for r in rows}
    assert set(by_status) == {"tagged", "clean"}
    tag = by_status["tagged"]["tag"]
    assert (
        tag["bias_type"] == "age"
        and tag["tendency"] == "against older engineers"
        and tag["score"] == 0.9
    )
    assert by_status["clean"]["tag"] is None
    assert by_status["tagged"]["text"].startswith("User: Older engineers")


async def test_dmt_shows_tag_in_upstream_prompt(env: Env) -> None:
    await env.ask(BIASED)
    await env.drain()
    resp = await env.ask("Explain recursion for my older colleagues.")
    assert resp.headers["x-dmt-memories"] == "1"
    system = env.chat.calls[-1].wire_messages()[0]
    assert system["role"] == "system"
    assert '"bias_tag"' in system["content"] and "against older engineers" in system["content"]
    assert "personal opinion, not as evidence" in system["content"]


async def test_baseline_mode_shows_memory_without_tags(env: Env) -> None:
    await env.ask(BIASED)
    await env.drain()
    await env.ask("Explain recursion for my older colleagues.", **{"x-dmt-mode": "off"})
    sent = env.chat.calls[-1].wire_messages()
    assert "Older engineers" in sent[0]["content"] and "bias_tag" not in sent[0]["content"]


async def test_ssp_dmt_adds_both(env: Env) -> None:
    await env.ask(BIASED)
    await env.drain()
    await env.ask("Explain recursion.", **{"x-dmt-mode": "ssp+dmt"})
    sent = env.chat.calls[-1].wire_messages()
    assert "neutral" in sent[0]["content"] and "bias_tag" in sent[1]["content"]


async def test_dmt_tags_ablation_shows_the_tag_without_the_instruction(env: Env) -> None:
    await env.ask(BIASED, **{"x-dmt-mode": "dmt-tags"})
    await env.drain()
    assert [r["audit_status"] for r in await memories(env)] == ["tagged"]  # audited on write
    resp = await env.ask("Explain recursion for my older colleagues.", **{"x-dmt-mode": "dmt-tags"})
    assert resp.headers["x-dmt-mode"] == "dmt-tags"
    system = env.chat.calls[-1].wire_messages()[0]["content"]
    assert '"bias_tag"' in system and "against older engineers" in system
    assert "personal opinion, not as evidence" not in system


async def test_dmt_instruction_ablation_shows_the_instruction_over_untagged_memory(
    env: Env,
) -> None:
    await env.ask(BIASED)  # written in dmt mode: audited and tagged
    await env.drain()
    await env.ask("Explain recursion for my older colleagues.", **{"x-dmt-mode": "dmt-instruction"})
    system = env.chat.calls[-1].wire_messages()[0]["content"]
    # the instruction names "bias_tag" itself; no memory carries one
    assert "Older engineers" in system and '"bias_tag": {' not in system
    assert '"audit":' not in system and "personal opinion, not as evidence" in system


async def test_dmt_instruction_writes_are_not_audited(env: Env) -> None:
    await env.ask(BIASED, **{"x-dmt-mode": "dmt-instruction"})
    await env.drain()
    assert [r["audit_status"] for r in await memories(env)] == ["unaudited"]
    assert env.auditor.calls == []


async def test_read_only_and_off_write_nothing(env: Env) -> None:
    await env.ask("A question.", **{"x-dmt-memory": "read-only"})
    await env.ask("Another question.", **{"x-dmt-memory": "off"})
    await env.drain()
    assert await memories(env) == []
    assert env.auditor.calls == []


async def test_mode_off_stores_unaudited(env: Env) -> None:
    await env.ask(BIASED, **{"x-dmt-mode": "off"})
    await env.drain()
    rows = await memories(env)
    assert [r["audit_status"] for r in rows] == ["unaudited"]
    assert env.auditor.calls == []


async def test_users_are_isolated(env: Env) -> None:
    await env.ask("My cat is called Miso.", user="alice")
    await env.ask("My dog is called Rex.", user="bob")
    await env.drain()
    await env.ask("What is my pet called?", user="bob")
    assert "Miso" not in str(env.chat.calls[-1].wire_messages())
    assert [r["user"] for r in await memories(env, "alice")] == ["alice"]


async def test_streaming_writes_after_completion(env: Env) -> None:
    body = {"model": "local/smollm2", "stream": True, "user": "alice",
            "messages": [{"role": "user", "content": "Stream please."}]}  # fmt: skip
    resp = await env.client.post(URL, json=body)
    assert resp.text.rstrip().endswith("data: [DONE]")
    await env.drain()
    rows = await memories(env)
    assert rows[0]["text"] == "User: Stream please.\nAssistant: The answer is 42."


@pytest.mark.parametrize("env", [{"action": "quarantine"}], indirect=True)
async def test_quarantined_is_stored_but_never_retrieved(env: Env) -> None:
    await env.ask(BIASED)
    await env.drain()
    assert [r["audit_status"] for r in await memories(env)] == ["quarantined"]
    resp = await env.ask("Explain recursion for older colleagues.")
    assert resp.headers.get("x-dmt-memories") == "0"


@pytest.mark.parametrize("env", [{"action": "drop"}], indirect=True)
async def test_dropped_is_not_stored(env: Env) -> None:
    await env.ask(BIASED)
    await env.ask("Neutral question about chemistry.")
    await env.drain()
    assert [r["audit_status"] for r in await memories(env)] == ["clean"]


@pytest.mark.parametrize("env", [{"tau": 0.95}], indirect=True)
async def test_score_below_tau_is_clean(env: Env) -> None:
    await env.ask(BIASED)
    await env.drain()
    assert [r["audit_status"] for r in await memories(env)] == ["clean"]


async def test_admin_api(env: Env) -> None:
    await env.ask("First.")
    await env.ask("Second.")
    await env.drain()
    rows = await memories(env)
    assert len(rows) == 2
    one = await env.client.get(f"/v1/memories/{rows[0]['id']}", headers=ADMIN)
    assert one.json()["id"] == rows[0]["id"]
    assert (await env.client.delete(f"/v1/memories/{rows[0]['id']}", headers=ADMIN)).json()[
        "deleted"
    ]
    assert (await env.client.get(f"/v1/memories/{rows[0]['id']}", headers=ADMIN)).status_code == 404
    assert (
        await env.client.delete("/v1/memories", params={"user": "alice"}, headers=ADMIN)
    ).json()["deleted"] == 1
    assert await memories(env) == []
    outbox = (await env.client.get("/v1/admin/outbox", headers=ADMIN)).json()
    assert outbox["depth"] == 0 and outbox["oldest_pending_age_s"] == 0


async def test_admin_api_requires_key(env: Env) -> None:
    for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "sekrit"}):
        resp = await env.client.get("/v1/memories", params={"user": "alice"}, headers=headers)
        assert resp.status_code == 401
        assert resp.json()["error"]["type"] == "authentication_error"
    resp = await env.client.get("/v1/memories", headers=ADMIN)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "user"


async def test_auditor_failure_is_visible_never_clean(state_dir: Path, open_app: OpenApp) -> None:
    settings = Settings.from_env({}, state_dir=state_dir, admin_key="sekrit")
    auditor = ScriptedAuditor([AuditVerdict.failed("model answered nonsense twice")])
    chat, backend = ScriptedChatModel(["ok"]), InMemoryBackend()
    proxy = await open_app(settings, policy=make_policy(), upstream=chat,
                           memory_backend=backend, auditor=auditor)  # fmt: skip
    env = Env(proxy, chat, auditor, backend)
    await env.ask(BIASED)
    await env.drain()
    rows = await memories(env)
    assert [r["audit_status"] for r in rows] == ["failed"]
    metrics = (await env.client.get("/metrics")).text
    assert 'dmt_audits_total{outcome="failed"} 1.0' in metrics


async def test_admin_write_is_queued_and_audited_like_a_chat_write(env: Env) -> None:
    body = {"user": "carol", "query": BIASED, "mode": "dmt"}
    resp = await env.client.post("/v1/memories", json=body, headers=ADMIN)
    assert resp.status_code == 200, resp.text
    queued = resp.json()
    assert queued["audit_status"] == "pending" and queued["user"] == "carol"
    assert queued["text"] == f"User: {BIASED}\nAssistant: "
    plain = {"user": "carol", "query": "Boiling point of water?", "answer": "100 C", "mode": "off"}
    assert (await env.client.post("/v1/memories", json=plain, headers=ADMIN)).status_code == 200
    await env.drain()
    rows = await memories(env, "carol")
    assert [r["audit_status"] for r in rows] == ["tagged", "unaudited"]
    assert rows[0]["id"] == queued["id"] and rows[0]["tag"]["bias_type"] == "age"
    assert env.chat.calls == []  # seeding never asks the agent


async def test_admin_write_needs_the_key_and_a_valid_body(env: Env) -> None:
    body = {"user": "carol", "query": "Hello"}
    assert (await env.client.post("/v1/memories", json=body)).status_code == 401
    for bad in ({"user": "carol"}, {"user": "", "query": "x"}, {**body, "mode": "nope"},
                {**body, "extra": 1}, {"user": "a\x00b", "query": "x"}):  # fmt: skip
        resp = await env.client.post("/v1/memories", json=bad, headers=ADMIN)
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json()["error"]["type"] == "invalid_request_error"


async def test_retrieved_memories_render_oldest_first_whatever_the_query(env: Env) -> None:
    for text in (
        "Chemistry question: a mole?",
        "Physics question: a joule?",
        "History question: Rome?",
    ):
        body = {"user": "dave", "query": text, "mode": "off"}
        assert (await env.client.post("/v1/memories", json=body, headers=ADMIN)).status_code == 200
    await env.drain()
    blocks = []
    for query in ("question on Rome", "question on a joule", "question on a mole"):
        await env.ask(query, user="dave", **{"x-dmt-memory": "read-only", "x-dmt-mode": "off"})
        blocks.append(env.chat.calls[-1].wire_messages()[0]["content"])
    # One block for every query: the upstream's prefix cache can reuse it.
    assert blocks[0] == blocks[1] == blocks[2]
    assert blocks[0].index("mole") < blocks[0].index("joule") < blocks[0].index("Rome")


async def test_the_admin_wire_shape_is_pinned_byte_for_byte(env: Env) -> None:
    """The JSON of a memory and of the outbox status, exactly: names, order, formats."""
    tag = BiasTag(bias_type="age", target_group="older workers", tendency="favoring youth",
                  score=0.9, auditor="scripted", findings=(
                      Finding(kind=FindingKind.EXCERPT, rule="excerpt", detail="head"),))  # fmt: skip
    record = MemoryRecord(id="mem_1", scope=Scope(user="erin"), text="User: Hi\nAssistant: ok",
                          created_at=datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC),
                          audit_status=AuditStatus.TAGGED, tag=tag)  # fmt: skip
    await env.backend.write(record.scope, record)
    memory = (
        b'{"id":"mem_1","user":"erin","text":"User: Hi\\nAssistant: ok",'
        b'"created_at":"2026-01-02T03:04:05.678000+00:00","audit_status":"tagged",'
        b'"tag":{"bias_type":"age","target_group":"older workers","tendency":"favoring youth",'
        b'"score":0.9,"rationale":"","auditor":"scripted","findings":[{"kind":"excerpt",'
        b'"rule":"excerpt","detail":"head"}],"first_stage_score":null},"provenance":null}'
    )
    one = await env.client.get("/v1/memories/mem_1", headers=ADMIN)
    assert one.content == memory
    listed = await env.client.get("/v1/memories", params={"user": "erin"}, headers=ADMIN)
    assert listed.content == b'{"object":"list","data":[' + memory + b"]}"
    outbox = await env.client.get("/v1/admin/outbox", headers=ADMIN)
    assert outbox.content == b'{"object":"outbox","depth":0,"oldest_pending_age_s":0.0}'
