"""The MCP memory server at ``/mcp``, driven by the ``mcp`` SDK's client over streamable HTTP.

The real app runs in process (its lifespan entered, so the outbox worker audits) with
the shipped in-memory backend, scripted auditor and scripted chat model; the client
talks to it through ``httpx2``'s ASGI transport, as it would over a socket.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult, TextContent

from dmt_proxy.api import create_app
from dmt_proxy.api.auth import hash_key
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.mcp_server.server import build_mcp_server
from dmt_proxy.mcp_server.tools import Caller, MemoryTools
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MAX_TEXT_CHARS
from dmt_proxy.memory.service import DurableMemoryService
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.timing import budget

KEYS = {"acme": "key-acme-1", "globex": "key-globex-2"}
TOOLS = {"add_memory", "search_memories", "get_memories", "get_memory", "update_memory",
         "delete_memory", "delete_all_memories"}  # fmt: skip


def make_app(
    tmp: Path, *, tenants: bool = False, mode: str = "dmt"
) -> tuple[FastAPI, ScriptedAuditor]:
    tenants_file = None
    if tenants:
        lines = ["version: 1", "tenants:"]
        for name, key in KEYS.items():
            lines += [f"  - name: {name}", f"    key_sha256: {hash_key(key)}"]
        tenants_file = tmp / "tenants.yaml"
        tenants_file.write_text("\n".join(lines) + "\n")
    settings = Settings.from_env({}, state_dir=tmp / "state", tenants_file=tenants_file)
    policy = parse_policy(
        # The scripted auditor decides every write (the judge beside it is not under test).
        {"version": 1, "mode": mode, "memory": {"backend": "memory", "top_k": 50},
         "audit": {"first_stage": "off"}}
    )  # fmt: skip
    auditor = ScriptedAuditor(
        lambda c: AuditVerdict.biased("gender", target_group="women", tendency="negative")
        if "women" in c.text.lower() else AuditVerdict.clean()
    )  # fmt: skip
    app = create_app(settings, policy=policy, upstream=ScriptedChatModel(["noted"]),
                     memory_backend=InMemoryBackend(), auditor=auditor)  # fmt: skip
    return app, auditor


@asynccontextmanager
async def started(app: FastAPI) -> AsyncIterator[FastAPI]:
    async with app.router.lifespan_context(app):
        yield app


@asynccontextmanager
async def mcp_client(app: FastAPI, **headers: str) -> AsyncIterator[Client]:
    """An MCP client on the app's ``/mcp``, sending ``headers`` with every request."""
    wire = {k.replace("_", "-"): v for k, v in headers.items()}
    async with (
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app),
            base_url="http://proxy",
            headers=wire,
            timeout=30,
        ) as http,  # fmt: skip
        Client(streamable_http_client("http://proxy/mcp", http_client=http)) as client,
    ):
        yield client


def text_of(result: CallToolResult) -> list[str]:
    return [block.text for block in result.content if isinstance(block, TextContent)]


def payload(result: CallToolResult) -> Any:
    assert not result.is_error, text_of(result)
    return json.loads(text_of(result)[-1])


async def drained(app: FastAPI) -> None:
    memory: DurableMemoryService = app.state.memory
    # A hang guard: the first audit loads the first stage's embedding model (seconds
    # from a cold disk cache).
    assert await memory.drain(timeout_s=budget(60))


async def test_tools_have_mem0_names(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with started(app), mcp_client(app) as client:
        listed = await client.list_tools()
    names = {tool.name for tool in listed.tools}
    assert names >= TOOLS
    add = next(t for t in listed.tools if t.name == "add_memory")
    assert add.input_schema["required"] == ["text"]
    assert {"text", "messages", "user_id", "metadata"} <= set(add.input_schema["properties"])


async def test_add_search_get_update_delete(tmp_path: Path) -> None:
    app, auditor = make_app(tmp_path)
    async with started(app), mcp_client(app) as client:
        added = payload(await client.call_tool("add_memory", {"text": "Women are bad drivers.",
                                                              "user_id": "alice"}))  # fmt: skip
        [row] = added["results"]
        assert row["status"] == "pending" and row["id"].startswith("mem_")
        await drained(app)
        assert len(auditor.calls) == 1  # through the outbox and the auditor, like a chat write

        found = await client.call_tool("search_memories", {"query": "drivers",
                                                           "filters": {"AND": [{"user_id": "alice"}]}})  # fmt: skip
        block, _ = text_of(found)
        [memory] = payload(found)["results"]
        assert memory["id"] == row["id"] and memory["audit_status"] == "tagged"
        assert memory["tag"]["bias_type"] == "gender"
        # The DMT framing of chat retrieval: nonce-delimited block, instruction, the tag.
        assert block.startswith("<memories-") and '"bias_tag"' in block
        assert app.state.memory.instruction in block

        got = payload(
            await client.call_tool("get_memory", {"memory_id": row["id"], "user_id": "alice"})
        )
        assert got["results"][0]["memory"].startswith("User: Women are bad drivers.")

        updated = payload(await client.call_tool("update_memory", {
            "memory_id": row["id"], "text": "Alice drives a blue car.", "user_id": "alice"}))  # fmt: skip
        assert updated["results"][0] == {"id": row["id"], "memory": "Alice drives a blue car.",
                                         "event": "UPDATE", "status": "pending"}  # fmt: skip
        await drained(app)
        listed = payload(await client.call_tool("get_memories", {"user_id": "alice"}))
        [memory] = listed["results"]
        assert memory["id"] == row["id"] and memory["audit_status"] == "clean"
        assert "blue car" in memory["memory"] and memory["tag"] is None

        deleted = payload(await client.call_tool("delete_memory", {"memory_id": row["id"],
                                                                   "user_id": "alice"}))  # fmt: skip
        assert deleted["id"] == row["id"]
        assert (
            payload(await client.call_tool("get_memories", {"user_id": "alice"}))["results"] == []
        )

        for text in ("one", "two"):
            await client.call_tool("add_memory", {"text": text, "user_id": "alice"})
        cleared = payload(await client.call_tool("delete_all_memories", {"user_id": "alice"}))
        assert cleared["deleted"] >= 2
        assert (
            payload(await client.call_tool("get_memories", {"user_id": "alice"}))["results"] == []
        )


async def test_mode_off_returns_memories_untagged(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, mode="off")
    async with started(app), mcp_client(app, x_dmt_user="bob") as client:
        await client.call_tool("add_memory", {"text": "Women are bad drivers."})
        await drained(app)
        found = await client.call_tool("search_memories", {"query": "drivers"})
        [memory] = payload(found)["results"]
        assert "audit_status" not in memory and "tag" not in memory
        assert '"bias_tag"' not in text_of(found)[0] and '"audit"' not in text_of(found)[0]


async def test_bad_arguments_are_tool_errors_naming_them(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with started(app), mcp_client(app) as client:
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("add_memory", {"text": "x"}, "user_id"),  # no user anywhere
            ("add_memory", {"text": "  ", "user_id": "a"}, "text"),
            ("search_memories", {"query": "q", "user_id": "a", "limit": 0}, "limit"),
            ("search_memories", {"query": "q", "filters": {"agent_id": "x"}}, "filters"),
            ("get_memories", {"user_id": "a", "page": 0}, "page"),
            ("get_memories", {"user_id": "a", "filters": {"user_id": "b"}}, "user_id"),
            ("get_memory", {"memory_id": "mem_none", "user_id": "a"}, "memory_id"),
            ("update_memory", {"memory_id": "mem_none", "text": "t", "user_id": "a"}, "memory_id"),
            ("delete_memory", {"memory_id": "", "user_id": "a"}, "memory_id"),
            ("add_memory", {"user_id": "a"}, "text"),  # missing: the SDK's schema check
            ("search_memories", {"query": "q", "user_id": "a", "limit": "many"}, "limit"),
        ]
        for tool, arguments, param in cases:
            result = await client.call_tool(tool, arguments)
            assert result.is_error, (tool, arguments)
            assert param in " ".join(text_of(result)), (tool, text_of(result))


async def test_oversized_text_is_refused_with_its_limit(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with started(app), mcp_client(app) as client:
        result = await client.call_tool("add_memory", {"text": "x" * (MAX_TEXT_CHARS + 1),
                                                       "user_id": "a"})  # fmt: skip
        assert result.is_error and str(MAX_TEXT_CHARS) in text_of(result)[0]
        assert (await app.state.memory.outbox_stats()).depth == 0  # nothing was queued


async def test_tenant_key_is_required_and_admin_key_never(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, tenants=True)
    async with started(app):
        async with httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=app), base_url="http://p"
        ) as http:
            response = await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert response.status_code == 401
        assert response.json()["error"]["type"] == "authentication_error"
        async with mcp_client(app, authorization=f"Bearer {KEYS['acme']}") as client:
            added = payload(await client.call_tool("add_memory", {"text": "hi", "user_id": "u"}))
        entry = await app.state.memory.get(added["results"][0]["id"])
        assert entry is not None and entry.user == "acme/u"


async def test_a_tool_write_has_the_callers_provenance(tmp_path: Path) -> None:
    """The agent wrote it, through MCP, with the tenant key the transport authenticated and
    the id of the HTTP request that carried the call; the tools' results show it."""
    app, _ = make_app(tmp_path, tenants=True)
    async with (
        started(app),
        mcp_client(app, authorization=f"Bearer {KEYS['acme']}", x_request_id="req-mcp-1") as client,
    ):  # fmt: skip
        added = payload(await client.call_tool("add_memory", {"text": "Tea at nine.",
                                                              "user_id": "u"}))  # fmt: skip
        await drained(app)
        [memory] = payload(await client.call_tool("get_memories", {"user_id": "u"}))["results"]
    assert memory["id"] == added["results"][0]["id"]
    prov = memory["provenance"]
    assert (prov["channel"], prov["query_by"], prov["answer_by"]) == ("mcp", "assistant", None)
    assert (prov["tenant"], prov["key_id"]) == ("acme", hash_key(KEYS["acme"])[:16])
    assert prov["request_id"] == "req-mcp-1" and prov["audited"] is not None


async def test_header_pins_the_user(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with started(app), mcp_client(app, x_dmt_user="alice") as client:
        result = await client.call_tool("get_memories", {"user_id": "bob"})
        assert result.is_error and "user_id" in text_of(result)[0]
        assert not (await client.call_tool("get_memories", {"user_id": "alice"})).is_error


USERS = st.sampled_from(["alice", "bob", "carol"])
TENANTS = st.sampled_from(sorted(KEYS))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(writes=st.lists(st.tuples(TENANTS, USERS, st.integers(0, 999)), min_size=1, max_size=6),
       reader=st.tuples(TENANTS, USERS))  # fmt: skip
def test_a_caller_never_reads_or_changes_another_scope(
    tmp_path_factory: pytest.TempPathFactory,
    writes: list[tuple[str, str, int]],
    reader: tuple[str, str],
) -> None:
    asyncio.run(_scope_property(tmp_path_factory.mktemp("mcp"), writes, reader))


async def _scope_property(
    tmp: Path, writes: list[tuple[str, str, int]], reader: tuple[str, str]
) -> None:
    app, _ = make_app(tmp, tenants=True)
    ids: dict[str, tuple[str, str]] = {}
    async with started(app):
        for tenant, user, n in writes:
            async with mcp_client(app, authorization=f"Bearer {KEYS[tenant]}") as client:
                added = payload(await client.call_tool("add_memory", {"text": f"fact {n} of {user}",
                                                                      "user_id": user}))  # fmt: skip
                ids[added["results"][0]["id"]] = (tenant, user)
        await drained(app)
        tenant, user = reader
        mine = {i for i, owner in ids.items() if owner == (tenant, user)}
        async with mcp_client(app, authorization=f"Bearer {KEYS[tenant]}") as client:
            listed = payload(
                await client.call_tool("get_memories", {"user_id": user, "page_size": 100})
            )
            found = payload(
                await client.call_tool("search_memories", {"query": "fact", "user_id": user})
            )
            assert {m["id"] for m in listed["results"]} == mine
            assert {m["id"] for m in found["results"]} <= mine
            for memory_id in set(ids) - mine:
                for tool, extra in (("get_memory", {}), ("delete_memory", {}),
                                    ("update_memory", {"text": "stolen"})):  # fmt: skip
                    result = await client.call_tool(
                        tool, {"memory_id": memory_id, "user_id": user, **extra}
                    )
                    assert result.is_error
            await client.call_tool("delete_all_memories", {"user_id": user})
        for memory_id, owner in ids.items():
            entry = await app.state.memory.get(memory_id)
            assert (entry is None) == (owner == (tenant, user))
            assert entry is None or "stolen" not in entry.text


def test_building_the_server_leaves_the_root_logger_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK configures logging in its constructor; the proxy's logging is the CLI's."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # as in a process nobody configured yet
    monkeypatch.setattr(root, "level", logging.WARNING)
    build_mcp_server(MemoryTools.__new__(MemoryTools), lambda _ctx: Caller())  # tools unused
    assert root.handlers == [] and root.level == logging.WARNING
