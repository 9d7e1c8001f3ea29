"""``/mcp`` on a real ``dmt-proxy serve`` process: the README's snippet, and kill -9.

The proxy runs the in-memory backend (mem0 on disk for kill -9) and the
shipped ``scripted`` auditor (clean), so no model runs. The snippet is run as a user
runs it; the durability test adds memories over MCP, kills the proxy with SIGKILL
and finds every acknowledged one after the restart, as the chat path's test does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from mcp import Client
from mcp.types import CallToolResult, TextContent

from tests.proxy_process import ProxyProcess
from tests.timing import budget

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = ROOT / "docs" / "snippets" / "mcp_memory.py"


def policy(tmp: Path, backend: str = "memory") -> Path:
    path = tmp / "policy.yaml"
    path.write_text(
        f"version: 1\nmode: dmt\nmemory:\n  backend: {backend}\n"
        'audit:\n  auditor: scripted\n  first_stage: "off"\n'
    )
    return path


def mcp_url(proxy: ProxyProcess) -> str:
    return f"http://127.0.0.1:{proxy.port}/mcp"


def payload(result: CallToolResult) -> Any:
    texts = [b.text for b in result.content if isinstance(b, TextContent)]
    assert not result.is_error, texts
    return json.loads(texts[-1])


def test_readme_mcp_snippet_runs_against_the_proxy(tmp_path: Path) -> None:
    proxy = ProxyProcess(state_dir=tmp_path / "state").start("--policy", str(policy(tmp_path)))
    try:
        env = {**os.environ, "DMT_MCP_URL": mcp_url(proxy)}
        done = subprocess.run([sys.executable, str(SNIPPET)], env=env, capture_output=True,
                              text=True, timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.split("\n") == ["pending", "<memories-", "clean None", ""]
    finally:
        proxy.stop()


def test_readme_carries_the_snippet_verbatim() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = dict(re.findall(r"<!-- snippet: (docs/snippets/\w+\.py) -->\n```python\n(.*?)```",
                             readme, flags=re.S))  # fmt: skip
    assert blocks["docs/snippets/mcp_memory.py"] == SNIPPET.read_text(encoding="utf-8")


async def _add(url: str, n: int) -> list[str]:
    async with Client(url) as client:
        return [
            payload(await client.call_tool("add_memory", {"text": f"fact {i}", "user_id": "u"}))[
                "results"
            ][0]["id"]
            for i in range(n)
        ]


async def _listed(url: str) -> list[dict[str, Any]]:
    async with Client(url) as client:
        answer = payload(await client.call_tool("get_memories", {"user_id": "u", "page_size": 100}))
        return list(answer["results"])


def test_acknowledged_mcp_writes_survive_kill_9(tmp_path: Path) -> None:
    # mem0 on disk: the in-memory fake keeps its records only across a clean shutdown.
    args = ("--policy", str(policy(tmp_path, "mem0")))
    proxy = ProxyProcess(state_dir=tmp_path / "state").start(*args)
    try:
        acknowledged = asyncio.run(_add(mcp_url(proxy), 20))
        proxy.kill()  # SIGKILL right after the last acknowledgement: no shutdown hook runs
        with closing(sqlite3.connect(tmp_path / "state" / "outbox.sqlite3")) as db:
            queued = int(db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0])
        assert queued > 0, "nothing was queued at the kill; the test proves nothing"
        proxy = ProxyProcess(state_dir=tmp_path / "state", port=proxy.port).start(*args)
        # A hang guard: the restarted proxy stores and audits what was queued at the kill.
        deadline = time.monotonic() + budget(120)
        while True:
            listed = asyncio.run(_listed(mcp_url(proxy)))
            if all(m["audit_status"] != "pending" for m in listed) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert {m["id"] for m in listed} == set(acknowledged)
        assert all(m["audit_status"] == "clean" for m in listed)
    finally:
        proxy.stop()
