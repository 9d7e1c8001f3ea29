"""An agent whose only memory is the MCP server: the README's snippet, on the embedded model.

A real proxy process (in-memory store, mode ``off`` so no auditor model runs) in front
of ``local/qwen2.5-1.5b``; the snippet (``docs/snippets/mcp_agent.py``) is the OpenAI
Agents SDK with ``MCPServerStreamableHttp`` at ``/mcp`` (mem0's ``add_memory`` and
``search_memories``) and the proxy's chat memory turned off. One run stores a fact,
a second run (no history) must answer with it: only the MCP memory can carry it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
SNIPPET = ROOT / "docs" / "snippets" / "mcp_agent.py"
ADMIN_KEY = "e2e-admin-key"


def test_an_agent_stores_a_fact_over_mcp_and_uses_it_in_a_later_run(
    proxy_factory: Callable[..., ProxyProcess], tmp_path: Path,
    local_model_base_url: Callable[[str], str],
) -> None:  # fmt: skip
    pytest.importorskip("agents")
    local_model_base_url("qwen2.5-1.5b")
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nmode: 'off'\nmemory:\n  backend: memory\n")
    proxy = proxy_factory("--policy", str(policy),
                          env={"DMT_ADMIN_KEY": ADMIN_KEY, "DMT_UPSTREAM_TIMEOUT_S": "900"})  # fmt: skip
    env = {**os.environ, "OPENAI_BASE_URL": proxy.base_url, "OPENAI_API_KEY": "unused",
           "DMT_MCP_URL": f"http://127.0.0.1:{proxy.port}/mcp"}  # fmt: skip
    done = subprocess.run([sys.executable, str(SNIPPET)], env=env, capture_output=True,
                          text=True, timeout=1500, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "teal" in done.stdout.lower(), done.stdout
    stored = httpx.get(proxy.base_url + "/memories", params={"user": "alice"},
                       headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=60)  # fmt: skip
    stored.raise_for_status()
    # Only the agent's add_memory wrote: the chat turns stored nothing (memory off).
    [memory] = stored.json()["data"]
    assert "teal" in memory["text"].lower()
