"""One memory per user turn: a tool loop retrieves once and writes its final answer once.

The upstream is the shipped ToolLoopChatModel (it calls the request's tool a
scripted number of times, then answers with what the tools returned), the auditor
the shipped ScriptedAuditor; the memory backend is the shipped in-memory backend in
embedding mode with a counting embedder, so the test counts query embeddings.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmt_proxy.api import create_app
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.openai_types import ChatMessage
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.tool_upstream import TOOL_ANSWER_PREFIX, ToolLoopChatModel
from dmt_proxy.turns import Retrieval, TurnCache, TurnKey, turn_of

URL = "/v1/chat/completions"
ADMIN = {"authorization": "Bearer sekrit"}
QUESTION = "What is the weather in Paris"
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "Weather of a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}  # fmt: skip


class CountingEmbedder:
    """A deterministic bag-of-words embedder that counts what it embeds."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        vectors = []
        for text in texts:
            vec = [0.0] * 16
            for word in text.lower().split():
                vec[int(hashlib.md5(word.encode()).hexdigest(), 16) % 16] += 1.0
            norm = math.sqrt(sum(v * v for v in vec)) or 1.0
            vectors.append([v / norm for v in vec])
        return vectors


def tool_output(call: dict[str, Any]) -> str:
    """What the client-side tool returns: the test's stand-in for a weather service."""
    city = json.loads(call["function"]["arguments"])["city"]
    return f"{city}: 21C and sunny (WX-{len(city)})"


@dataclass
class Env:
    client: httpx.AsyncClient
    chat: ToolLoopChatModel
    auditor: ScriptedAuditor
    embedder: CountingEmbedder
    app: Any

    async def drain(self) -> None:
        assert await self.app.state.memory.drain(timeout_s=10)

    async def memories(self, user: str = "alice") -> list[dict[str, Any]]:
        resp = await self.client.get("/v1/memories", params={"user": user}, headers=ADMIN)
        assert resp.status_code == 200, resp.text
        return list(resp.json()["data"])

    async def step(self, messages: list[dict[str, Any]], *, stream: bool) -> httpx.Response:
        body = {"model": "local/smollm2", "messages": messages, "tools": [TOOL],
                "user": "alice", "stream": stream}  # fmt: skip
        return await self.client.post(URL, json=body)

    async def run_turn(
        self, messages: list[dict[str, Any]], *, stream: bool
    ) -> tuple[str, list[httpx.Response]]:
        """Drive the loop as an agent framework does; the final text and every response."""
        responses = []
        for _ in range(20):
            resp = await self.step(messages, stream=stream)
            assert resp.status_code == 200, resp.text
            responses.append(resp)
            message = (
                streamed_message(resp.text) if stream else resp.json()["choices"][0]["message"]
            )
            if not message.get("tool_calls"):
                messages.append({"role": "assistant", "content": message["content"]})
                return str(message["content"]), responses
            messages.append({"role": "assistant", "content": None,
                             "tool_calls": message["tool_calls"]})  # fmt: skip
            for call in message["tool_calls"]:
                messages.append({"role": "tool", "tool_call_id": call["id"],
                                 "content": tool_output(call)})  # fmt: skip
        raise AssertionError("the tool loop did not end")


def streamed_message(sse: str) -> dict[str, Any]:
    """Reassemble the assistant message of a chat stream, as a client library does."""
    content, calls = "", {}  # type: ignore[var-annotated]
    for line in sse.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        delta = json.loads(line[6:])["choices"][0]["delta"]
        content += delta.get("content") or ""
        for frag in delta.get("tool_calls") or []:
            call = calls.setdefault(frag["index"], {"id": "", "type": "function",
                                                    "function": {"name": "", "arguments": ""}})  # fmt: skip
            call["id"] = frag.get("id") or call["id"]
            fn = frag.get("function") or {}
            call["function"]["name"] += fn.get("name") or ""
            call["function"]["arguments"] += fn.get("arguments") or ""
    return {"content": content, "tool_calls": [calls[i] for i in sorted(calls)] or None}


@pytest.fixture
async def env(state_dir: Path) -> AsyncIterator[Env]:
    settings = Settings.from_env({}, state_dir=state_dir, admin_key="sekrit")
    # Every write reaches the scripted auditor (the first stage, on by default, is off here).
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory", "top_k": 3},
                           "audit": {"tau": 0.5, "first_stage": "off"}})  # fmt: skip
    chat = ToolLoopChatModel(tool_steps=4)  # four tool calls, then the answer: five requests
    auditor = ScriptedAuditor()
    embedder = CountingEmbedder()
    backend = InMemoryBackend(embedder=embedder)
    # One earlier memory, so that retrieval has something to search (and to embed against).
    await backend.write(Scope(user="alice"), MemoryRecord(
        id="seed", scope=Scope(user="alice"), text="User: I live in Paris\nAssistant: Noted."))  # fmt: skip
    app = create_app(settings, policy=policy, upstream=chat, memory_backend=backend,
                     auditor=auditor)  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://proxy"
        ) as client,
    ):
        yield Env(client, chat, auditor, embedder, app)


@pytest.mark.parametrize("stream", [False, True], ids=["complete", "stream"])
async def test_five_step_tool_loop_retrieves_once_and_writes_once(env: Env, stream: bool) -> None:
    embedded_before = len(env.embedder.texts)
    answer, responses = await env.run_turn([{"role": "user", "content": QUESTION}], stream=stream)

    assert len(responses) == 5 and len(env.chat.calls) == 5
    assert answer.startswith(TOOL_ANSWER_PREFIX) and "WX-5" in answer  # the tool round trip
    # One retrieval for the whole turn: the query was embedded once, not five times.
    assert env.embedder.texts[embedded_before:].count(QUESTION) == 1
    assert [r.headers.get("x-dmt-memory-retrieval") for r in responses] == [
        None,
        *["reused (same user turn)"] * 4,
    ]
    # Every step saw the same retrieved memory.
    assert all("I live in Paris" in c.wire_messages()[0]["content"] for c in env.chat.calls)
    if not stream:  # a stream's headers leave before its answer (and the write) is known
        assert [r.headers.get("x-dmt-memory-write") for r in responses] == [
            *["skipped; tool-call step (the turn's final answer is written)"] * 4,
            "queued",
        ]

    await env.drain()
    rows = [r for r in await env.memories() if r["id"] != "seed"]
    assert [r["text"] for r in rows] == [f"User: {QUESTION}\nAssistant: {answer}"]
    # The auditor judged the user's words only; tool outputs never stand in for them.
    assert [c.text for c in env.auditor.calls] == [QUESTION]


async def test_each_user_turn_of_a_conversation_is_one_memory(env: Env) -> None:
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    first, _ = await env.run_turn(messages, stream=False)
    messages.append({"role": "user", "content": "And in Lyon"})
    second, _ = await env.run_turn(messages, stream=True)
    # The same words said again later are a new turn, retrieved afresh.
    messages.append({"role": "user", "content": QUESTION})
    third, responses = await env.run_turn(messages, stream=False)
    assert responses[0].headers.get("x-dmt-memory-retrieval") is None
    await env.drain()
    rows = [r["text"] for r in await env.memories() if r["id"] != "seed"]
    assert rows == [f"User: {QUESTION}\nAssistant: {first}",
                    f"User: And in Lyon\nAssistant: {second}",
                    f"User: {QUESTION}\nAssistant: {third}"]  # fmt: skip


def msgs(*pairs: tuple[str, str]) -> list[ChatMessage]:
    return [ChatMessage(role=role, content=text) for role, text in pairs]  # type: ignore[arg-type]


def test_turn_of_names_the_turn_and_its_steps() -> None:
    first = turn_of(msgs(("system", "s"), ("user", "hi")))
    assert (first.query, first.continuation) == ("hi", False)
    step = turn_of(msgs(("system", "s"), ("user", "hi"), ("assistant", ""), ("tool", "out")))
    assert (step.query, step.continuation, step.key) == ("hi", True, first.key)
    later = turn_of(msgs(("system", "s"), ("user", "hi"), ("assistant", "yo"), ("user", "hi")))
    assert later.query == "hi" and later.key != first.key
    assert turn_of(msgs(("system", "only"))).query == ""


def test_turn_cache_expires_bounds_and_skips_failed_retrievals() -> None:
    now = [0.0]
    cache = TurnCache(max_turns=2, ttl_s=10.0, clock=lambda: now[0])
    a, b, c = (TurnKey(user="u", mode="dmt", turn=t) for t in "abc")
    hit = Retrieval(messages=[{"role": "system", "content": "m"}])
    cache.put(a, hit)
    assert cache.get(a) == hit
    now[0] = 10.5
    assert cache.get(a) is None and len(cache) == 0  # expired
    cache.put(a, hit)
    cache.put(b, hit)
    cache.get(a)  # a is now the most recently used
    cache.put(c, hit)
    assert (cache.get(a), cache.get(b), cache.get(c)) == (hit, None, hit)
    cache.put(b, Retrieval(reusable=False))  # a failed search is tried again next step
    assert cache.get(b) is None
    assert cache.get(TurnKey(user="other", mode="dmt", turn="a")) is None
