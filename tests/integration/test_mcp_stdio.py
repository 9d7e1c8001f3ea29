"""``dmt-proxy mcp``: the real subprocess, driven by the ``mcp`` SDK's stdio client.

The policy uses the in-memory backend and the shipped ``scripted`` auditor (by name it
answers clean), so no model runs; what is tested is the command, the transport and
the write path in a separate process: add, audit, search, get, update, delete.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.types import CallToolResult, TextContent

from tests.timing import budget

ROOT = Path(__file__).resolve().parents[2]


def server(tmp: Path) -> StdioServerParameters:
    policy = tmp / "policy.yaml"
    policy.write_text(
        "version: 1\nmode: dmt\nmemory:\n  backend: memory\n"
        'audit:\n  auditor: scripted\n  first_stage: "off"\n'
    )
    env = {"PYTHONPATH": str(ROOT), "PATH": os.environ.get("PATH", ""),
           "DMT_STATE_DIR": str(tmp / "state"), "DMT_POLICY_FILE": str(policy)}  # fmt: skip
    code = "from dmt_proxy.cli.proxy_cli import main; raise SystemExit(main())"
    return StdioServerParameters(command=sys.executable, args=["-c", code, "mcp",
                                 "--user-id", "alice"], env=env, cwd=str(tmp))  # fmt: skip


def payload(result: CallToolResult) -> Any:
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    assert not result.is_error, texts
    return json.loads(texts[-1])


async def audited(client: Client) -> list[dict[str, Any]]:
    """The user's memories once none is pending (the subprocess's worker audits them)."""
    # A hang guard: the subprocess's worker audits in the background.
    deadline = time.monotonic() + budget(60)
    while True:
        found: list[dict[str, Any]] = payload(await client.call_tool("get_memories", {}))["results"]
        if all(m["audit_status"] != "pending" for m in found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"still pending: {found}")
        await asyncio.sleep(0.05)


async def test_stdio_add_search_get_update_delete(tmp_path: Path) -> None:
    async with Client(server(tmp_path)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert {"add_memory", "search_memories", "get_memories", "get_memory",
                "update_memory", "delete_memory", "delete_all_memories"} <= names  # fmt: skip
        added = payload(await client.call_tool("add_memory", {"text": "Alice likes tea."}))
        [row] = added["results"]
        assert row["status"] == "pending"
        [memory] = await audited(client)
        assert memory["id"] == row["id"] and memory["audit_status"] == "clean"

        found = await client.call_tool("search_memories", {"query": "tea"})
        assert found.content[0].type == "text" and found.content[0].text.startswith("<memories-")
        assert [m["id"] for m in payload(found)["results"]] == [row["id"]]
        got = payload(await client.call_tool("get_memory", {"memory_id": row["id"]}))
        assert "tea" in got["results"][0]["memory"]

        payload(await client.call_tool("update_memory", {"memory_id": row["id"],
                                                         "text": "Alice likes coffee."}))  # fmt: skip
        [memory] = await audited(client)
        assert memory["id"] == row["id"] and "coffee" in memory["memory"]

        payload(await client.call_tool("delete_memory", {"memory_id": row["id"]}))
        assert payload(await client.call_tool("get_memories", {}))["results"] == []
        bad = await client.call_tool("get_memory", {"memory_id": row["id"]})
        assert bad.is_error
