"""A stream reports its memory write in-band, as an SSE comment before its closing events,
in the words of the non-streamed ``x-dmt-memory-write`` header; SDK clients skip it.

The upstream is the shipped ScriptedChatModel (a fake: this is about the proxy's wire
format), the backend the shipped in-memory one, the real app in process.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from openai import AsyncOpenAI

from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.app import InProcessApp
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.fixtures import OpenApp

QUEUED = b": x-dmt-memory-write: queued\n\n"


async def proxy(state_dir: Path, open_app: OpenApp) -> InProcessApp:
    settings = Settings.from_env({}, state_dir=state_dir)
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"}})
    return await open_app(settings, policy=policy, upstream=ScriptedChatModel(["Noted."]),
                          auditor=ScriptedAuditor())  # fmt: skip


def chat(user: str | None, **extra: object) -> dict[str, object]:
    body: dict[str, object] = {"model": "local/smollm2", "stream": True,
                               "messages": [{"role": "user", "content": "Remember tea."}]}  # fmt: skip
    if user is not None:
        body["user"] = user
    return body | extra


async def test_a_chat_stream_reports_its_write_before_done(
    state_dir: Path, open_app: OpenApp
) -> None:
    app = await proxy(state_dir, open_app)
    plain = await app.client.post("/v1/chat/completions", json=chat("ann", stream=False))
    assert plain.headers["x-dmt-memory-write"] == "queued"

    streamed = await app.client.post("/v1/chat/completions", json=chat("ann"))
    assert streamed.status_code == 200
    assert "x-dmt-memory-write" not in streamed.headers  # unknown when the headers left
    assert streamed.content.endswith(QUEUED + b"data: [DONE]\n\n")

    # No user, no write: no report either.
    anonymous = await app.client.post("/v1/chat/completions", json=chat(None))
    assert b"x-dmt-memory-write" not in anonymous.content
    read_only = await app.client.post("/v1/chat/completions", json=chat("ann"),
                                      headers={"x-dmt-memory": "read-only"})  # fmt: skip
    assert b"x-dmt-memory-write" not in read_only.content


async def test_a_responses_stream_reports_its_write_before_its_last_events(
    state_dir: Path, open_app: OpenApp
) -> None:
    app = await proxy(state_dir, open_app)
    body = {"model": "local/smollm2", "input": "Remember tea.", "user": "ann", "stream": True}
    streamed = await app.client.post("/v1/responses", json=body)
    assert streamed.status_code == 200
    blocks = streamed.content.decode().strip().split("\n\n")
    comment = blocks.index(QUEUED.decode().strip())
    last = json.loads(blocks[-1].split("data: ", 1)[1])
    assert last["type"] == "response.completed" and comment < len(blocks) - 1


async def test_the_openai_sdk_reads_a_reported_stream_unchanged(
    state_dir: Path, open_app: OpenApp
) -> None:
    app = await proxy(state_dir, open_app)
    transport = httpx.ASGITransport(app=app.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        sdk = AsyncOpenAI(base_url="http://proxy/v1", api_key="unused", http_client=http)
        stream = await sdk.chat.completions.create(
            model="local/smollm2", stream=True, user="ann",
            messages=[{"role": "user", "content": "Remember tea."}],
        )  # fmt: skip
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Noted."
