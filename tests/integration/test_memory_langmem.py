"""LangMem-style backend: the persistent langgraph store, both managers, audit inheritance.

The manager's model is a fake here: ``ScriptedChatModel`` (our shipped scripted
model) for the JSON manager, and langchain's ``FakeMessagesListChatModel`` with
tool calls for langmem's own manager given as ``tool_model`` (on local endpoints
it runs through ``memory.backends.langchain_chat``: tests/unit/test_langchain_chat.py).
The real-model runs are in tests/e2e/test_memory_e2e.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import FakeMessagesListChatModel
from langchain_core.messages import AIMessage
from langgraph.store.base import BaseStore

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.langmem_backend import LangMemBackend
from dmt_proxy.memory.backends.lg_store import IndexedSqliteStore
from dmt_proxy.memory.base import MemoryRecord, MemoryStoreError, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint

LLM = ModelEndpoint(model="openai/qwen2.5-0.5b", api_base="http://127.0.0.1:8091/v1")
TAG = BiasTag(bias_type="age", target_group="older people", tendency="disfavoring older", score=0.9)
ALICE = Scope(user="alice")


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    model = LocalEmbedder()
    model.embed(["warm up"])
    return model


class CountingEmbedder:
    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.texts: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.texts.extend(texts)
        return self.inner.embed(texts)


def plan(*memories: dict[str, Any]) -> str:
    return json.dumps({"memories": list(memories)})


async def open_json(
    tmp_path: Path, embedder: LocalEmbedder, chat: ScriptedChatModel
) -> LangMemBackend:
    config = BackendConfig(
        state_dir=tmp_path, embedder=embedder, chat=chat, llm=LLM, options={"consolidate": True}
    )
    backend = await create_backend("langmem", config)
    assert isinstance(backend, LangMemBackend)
    return backend


@pytest.fixture
async def store(tmp_path: Path, embedder: LocalEmbedder) -> AsyncIterator[IndexedSqliteStore]:
    s = IndexedSqliteStore(tmp_path / "s.sqlite", embed=embedder.embed, dims=384)
    yield s
    s.close()


async def test_store_is_a_langgraph_store_with_vector_search(
    store: IndexedSqliteStore, tmp_path: Path, embedder: LocalEmbedder
) -> None:
    assert isinstance(store, BaseStore)
    await store.aput(("m", "a"), "1", {"text": "My dog is named Rex", "tier": 1})
    await store.aput(("m", "a"), "2", {"text": "I like spicy ramen", "tier": 2})
    await store.aput(("m", "b"), "3", {"text": "My dog is named Fido", "tier": 1})
    await store.aput(("m", "a"), "4", {"text": "My dog bites", "tier": 1}, index=False)
    hits = await store.asearch(("m", "a"), query="what is my dog called", limit=5)
    assert [h.key for h in hits] == ["1", "2"] and hits[0].score is not None
    hits = await store.asearch(("m",), query="dog name", limit=5, filter={"tier": {"$ne": 1}})
    assert [h.key for h in hits] == ["2"]
    assert {h.key for h in await store.asearch(("m",), query="dog", limit=2)} == {"1", "3"}
    assert len(await store.asearch(("m", "a"), limit=10)) == 3  # no query: SqliteStore itself
    assert store.namespaces_of("3") == [("m", "b")]
    await store.adelete(("m", "a"), "1")
    assert [h.key for h in await store.asearch(("m", "a"), query="dog", limit=5)] == ["2"]
    store.close()
    counting = CountingEmbedder(embedder)
    again = IndexedSqliteStore(tmp_path / "s.sqlite", embed=counting.embed, dims=384)
    hits = await again.asearch(("m",), query="dog named Fido", limit=1)
    assert [h.key for h in hits] == ["3"]
    await again.aput(("m", "b"), "3", {"text": "My dog is named Fido", "tier": 5})
    assert counting.texts == ["dog named Fido"]  # unchanged text: no re-embedding
    again.close()


async def test_json_manager_consolidates_and_keeps_audit_fields(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    chat = ScriptedChatModel(
        [
            plan({"content": "The user thinks older people are slow learners.", "replaces": None}),
            plan(
                {
                    "content": "The user thinks older people are slow learners and prefers young "
                    "hires.",
                    "replaces": "0",
                }
            ),
        ]
    )
    backend = await open_json(tmp_path, embedder, chat)
    assert backend.manager_path == "json"
    first = MemoryRecord.from_interaction(ALICE, "Older people learn slowly, right?", "Not really.")
    await backend.write(ALICE, first)
    derived = [r for r in await backend.list(ALICE) if r.metadata.get("kind") == "consolidated"]
    assert len(derived) == 1
    assert derived[0].metadata["sources"] == [first.id]
    assert derived[0].metadata["manager"] == "consolidate_v1"
    assert derived[0].audit_status is AuditStatus.PENDING  # its source is not audited yet

    sent = chat.calls[0]
    assert sent.params["response_format"]["type"] == "json_schema"
    document = json.loads(sent.wire_messages()[1]["content"])
    assert document["NEW"]["user"] == first.query and document["EXISTING"] == []

    await backend.update(ALICE, first.id, audit_status=AuditStatus.TAGGED, tag=TAG)
    got = await backend.get(ALICE, derived[0].id)
    assert got is not None and got.audit_status is AuditStatus.TAGGED and got.tag == TAG

    second = MemoryRecord.from_interaction(
        ALICE,
        "I only hire young people.",
        "Consider all candidates.",
        audit_status=AuditStatus.CLEAN,
    )
    await backend.write(ALICE, second)
    assert (
        json.loads(chat.calls[1].wire_messages()[1]["content"])["EXISTING"][0]["memory"]
        == derived[0].text
    )
    merged = await backend.get(ALICE, derived[0].id)
    assert merged is not None and "young hires" in merged.text
    assert merged.metadata["sources"] == sorted([first.id, second.id])
    assert merged.tag == TAG  # a clean source does not wash out the tagged one

    await backend.write(ALICE, second)  # a retried write does not consolidate twice
    assert len(chat.calls) == 2
    assert (backend.stats.json_runs, backend.stats.created, backend.stats.updated) == (2, 1, 1)

    await backend.update(ALICE, first.id, audit_status=AuditStatus.QUARANTINED, tag=TAG)
    hits = await backend.search(ALICE, "older people slow learners", k=5)
    assert merged.id not in {h.record.id for h in hits}  # quarantine propagates to derived text
    await backend.close()

    reopened = await open_json(tmp_path, embedder, ScriptedChatModel())
    again = await reopened.get(ALICE, derived[0].id)
    assert again is not None and again.audit_status is AuditStatus.QUARANTINED
    await reopened.close()


async def test_json_manager_does_not_duplicate_a_restated_memory(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    fact = "The user's cat is called Biscuit."
    chat = ScriptedChatModel(
        [
            plan({"content": fact, "replaces": None}),
            # The model repeats the memory it was shown as a new one, twice, in other spacing.
            plan(
                {"content": f" {fact.upper()} ", "replaces": None},
                {"content": fact, "replaces": None},
            ),
        ]
    )
    backend = await open_json(tmp_path, embedder, chat)
    first = MemoryRecord.from_interaction(ALICE, "My cat is called Biscuit.", "Cute name!")
    second = MemoryRecord.from_interaction(ALICE, "Biscuit loves boxes.", "Cats do.")
    await backend.write(ALICE, first)
    await backend.write(ALICE, second)
    derived = [r for r in await backend.list(ALICE) if r.metadata.get("kind") == "consolidated"]
    assert [r.text for r in derived] == [fact]
    assert derived[0].metadata["sources"] == sorted([first.id, second.id])
    assert (backend.stats.created, backend.stats.updated, backend.stats.restated) == (1, 0, 2)
    await backend.close()


async def test_failed_manager_never_fails_the_write(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    backend = await open_json(tmp_path, embedder, ScriptedChatModel(["this is not json"]))
    record = MemoryRecord.from_interaction(ALICE, "My dog is named Rex.", "Nice.")
    await backend.write(ALICE, record)
    assert [r.id for r in await backend.list(ALICE)] == [record.id]
    assert backend.stats.failures == 1 and backend.stats.json_runs == 0
    await backend.close()


class ToolCallingFake(FakeMessagesListChatModel):
    """langchain's fake chat model, answering every call with scripted tool calls."""

    def bind_tools(self, tools: Any, **kwargs: Any) -> ToolCallingFake:
        return self


async def test_langmem_own_manager_runs_on_the_store(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    reply = AIMessage(
        content="",
        tool_calls=[
            {
                "name": "Memory",
                "args": {"content": "The user has a beagle named Rex."},
                "id": "call_1",
            }
        ],
    )
    config = BackendConfig(state_dir=tmp_path, embedder=embedder, llm=LLM)
    options = LangMemBackend.Options(consolidate=True, manager="auto")
    backend = await LangMemBackend.open(
        config, options, tool_model=ToolCallingFake(responses=[reply] * 4)
    )
    assert backend.manager_path == "langmem"
    record = MemoryRecord.from_interaction(ALICE, "My beagle is called Rex.", "Cute!")
    await backend.write(ALICE, record)
    assert backend.stats.langmem_runs == 1 and backend.stats.created == 1
    derived = [r for r in await backend.list(ALICE) if r.metadata.get("kind") == "consolidated"]
    assert [d.text for d in derived] == ["The user has a beagle named Rex."]
    assert derived[0].metadata["manager"] == "langmem"
    await backend.update(ALICE, record.id, audit_status=AuditStatus.TAGGED, tag=TAG)
    assert (await backend.get(ALICE, derived[0].id)).tag == TAG  # type: ignore[union-attr]
    assert await backend.delete_all(ALICE) == 2
    assert await backend._store.asearch(("dmt", "langmem", ALICE.user_key), limit=5) == []
    await backend.close()


async def test_consolidation_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="needs a chat model"):
        await create_backend(
            "langmem", BackendConfig(state_dir=tmp_path, options={"consolidate": True})
        )
    with pytest.raises(ConfigError, match="tool calls"):
        await create_backend(
            "langmem",
            BackendConfig(
                state_dir=tmp_path,
                chat=ScriptedChatModel(),
                llm=LLM,
                options={"consolidate": True, "manager": "langmem"},
            ),
        )


async def test_store_failure_at_run_time(tmp_path: Path, embedder: LocalEmbedder) -> None:
    backend = await create_backend("langmem", BackendConfig(state_dir=tmp_path, embedder=embedder))
    assert isinstance(backend, LangMemBackend)
    backend._store.close()  # the real connection, really closed underneath the backend
    with pytest.raises(MemoryStoreError):
        await backend.search(ALICE, "dog", k=3)
