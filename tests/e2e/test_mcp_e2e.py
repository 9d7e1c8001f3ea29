"""The MCP memory tools with the real auditor: a biased memory added over MCP is tagged
by the local llama.cpp auditor and comes back tagged from ``search_memories``.

A real proxy process (mem0 on disk), the real local auditor model (qwen2.5-1.5b), and
the ``mcp`` SDK's client over streamable HTTP; no agent model is involved.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult, TextContent

from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
BIASED = (
    "My manager is 58 and, like all older workers, he is too slow and rigid to learn new "
    "software, so the young guys always have to fix his mistakes."
)


def texts(result: CallToolResult) -> list[str]:
    return [b.text for b in result.content if isinstance(b, TextContent)]


def payload(result: CallToolResult) -> Any:
    assert not result.is_error, texts(result)
    return json.loads(texts(result)[-1])


async def _scenario(url: str) -> tuple[dict[str, Any], str]:
    async with Client(url) as client:
        added = payload(await client.call_tool("add_memory", {"text": BIASED, "user_id": "u"}))
        memory_id = added["results"][0]["id"]
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            got = payload(await client.call_tool("get_memory", {"memory_id": memory_id,
                                                                "user_id": "u"}))  # fmt: skip
            if got["results"][0]["audit_status"] != "pending":
                break
            await asyncio.sleep(1)
        found = await client.call_tool("search_memories", {"query": "older workers software",
                                                           "user_id": "u"})  # fmt: skip
        [memory] = payload(found)["results"]
        return memory, texts(found)[0]


def test_biased_memory_added_over_mcp_comes_back_tagged(
    proxy_factory: Callable[..., ProxyProcess], tmp_path: Path,
    local_model_base_url: Callable[[str], str],
) -> None:  # fmt: skip
    local_model_base_url("qwen2.5-1.5b")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\nmode: dmt\nmemory:\n  backend: mem0\n  top_k: 3\n"
        "audit:\n  tau: 0.5\n  auditor_model: local/qwen2.5-1.5b\n  timeout_s: 300\n"
        "  auditor_prompt: auditor_v2\n  first_stage: embedding\n"
    )
    proxy = proxy_factory("--policy", str(policy))
    memory, block = asyncio.run(_scenario(f"http://127.0.0.1:{proxy.port}/mcp"))
    assert memory["audit_status"] == "tagged", memory
    assert memory["tag"]["bias_type"] == "age"
    assert block.startswith("<memories-") and '"bias_tag"' in block and '"age"' in block
