"""Letta/MemGPT-style paging: bounded core, archival overflow, recursive summary, audit inheritance.

Summaries come from the deterministic summarizer or from ``ScriptedChatModel``
(our shipped scripted model, a fake); the real-model summary runs in
tests/e2e/test_memory_e2e.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import UpstreamError
from dmt_proxy.memory.backends.consolidation import summarize_deterministic
from dmt_proxy.memory.backends.letta_backend import LettaPagingBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.testing.chat import Reply, ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint

LLM = ModelEndpoint(model="openai/qwen2.5-0.5b", api_base="http://127.0.0.1:8091/v1")
TAG = BiasTag(bias_type="gender", target_group="women", tendency="disfavoring women", score=0.7)
ALICE = Scope(user="alice")
SMALL = {"core_size": 3, "page_size": 2, "core_hits": 1}

TOPICS = [
    ("My dog is named Rex.", "Nice dog."),
    ("I work as a nurse in Lyon.", "Good job."),
    ("My favourite food is spicy ramen.", "Tasty."),
    ("I am planning a trip to Norway.", "Lovely fjords."),
    ("My sister lives in Toronto.", "Great city."),
]


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    model = LocalEmbedder()
    model.embed(["warm up"])
    return model


async def open_letta(
    tmp_path: Path, embedder: LocalEmbedder, chat: ScriptedChatModel | None = None, **options: Any
) -> LettaPagingBackend:
    config = BackendConfig(
        state_dir=tmp_path,
        embedder=embedder,
        chat=chat,
        llm=LLM if chat else None,
        options={**SMALL, **options},
    )
    backend = await create_backend("letta", config)
    assert isinstance(backend, LettaPagingBackend)
    return backend


async def write_all(backend: LettaPagingBackend, scope: Scope = ALICE) -> list[MemoryRecord]:
    records = [MemoryRecord.from_interaction(scope, q, a) for q, a in TOPICS]
    for record in records:
        await backend.write(scope, record)
    return records


def test_deterministic_summary_is_bounded_and_recursive() -> None:
    first = summarize_deterministic("", ["User: a\nAssistant: b"], max_chars=100)
    assert first == "User: a Assistant: b"
    second = summarize_deterministic(first, ["x" * 300], max_chars=250)
    assert len(second) <= 250 and second.endswith("…")
    assert summarize_deterministic("old", ["new"], max_chars=100) == "old\nnew"


async def test_overflow_pages_out_and_summarizes(tmp_path: Path, embedder: LocalEmbedder) -> None:
    backend = await open_letta(tmp_path, embedder)
    records = await write_all(backend)
    # 4th write overflowed core_size=3: the 2 oldest went to archival and were summarized.
    assert (backend.stats.page_outs, backend.stats.evicted) == (1, 2)
    assert backend.stats.deterministic_summaries == 1
    summary = backend.summary(ALICE)
    assert summary is not None and "Rex" in summary and "nurse" in summary
    listed = await backend.list(ALICE)
    assert {r.id for r in listed} >= {r.id for r in records}
    kinds = [r.metadata.get("kind") for r in listed]
    assert kinds.count("summary") == 1

    hits = await backend.search(ALICE, "What is my dog called?", k=3)
    # core first (core_hits=1: the best core match), then archival by similarity
    core_ids = {r.id for r in records[2:]} | {r.id for r in listed if r.metadata.get("kind")}
    assert hits[0].record.id in core_ids
    assert records[0].id in [h.record.id for h in hits[1:]]
    await backend.close()

    reopened = await open_letta(tmp_path, embedder)
    assert reopened.summary(ALICE) == summary
    hits = await reopened.search(ALICE, "What is my dog called?", k=3)
    assert records[0].id in [h.record.id for h in hits]
    await reopened.close()


async def test_summary_inherits_tags_of_paged_out_records(
    tmp_path: Path, embedder: LocalEmbedder
) -> None:
    backend = await open_letta(tmp_path, embedder)
    records = await write_all(backend)
    summary_id = next(r.id for r in await backend.list(ALICE) if r.metadata.get("kind"))
    before = await backend.get(ALICE, summary_id)
    assert before is not None and before.audit_status is AuditStatus.PENDING
    await backend.update(ALICE, records[1].id, audit_status=AuditStatus.TAGGED, tag=TAG)
    after = await backend.get(ALICE, summary_id)
    assert after is not None and after.audit_status is AuditStatus.TAGGED and after.tag == TAG
    await backend.update(ALICE, records[0].id, audit_status=AuditStatus.QUARANTINED, tag=TAG)
    hits = await backend.search(ALICE, "dog named Rex nurse", k=5)
    assert summary_id not in {h.record.id for h in hits}
    assert records[0].id not in {h.record.id for h in hits}
    # the summary's own verdict combines with its sources'
    await backend.update(ALICE, records[0].id, audit_status=AuditStatus.CLEAN, tag=None)
    await backend.update(ALICE, records[1].id, audit_status=AuditStatus.CLEAN, tag=None)
    cleaned = await backend.update(ALICE, summary_id, audit_status=AuditStatus.CLEAN, tag=None)
    assert cleaned is not None and cleaned.audit_status is AuditStatus.CLEAN
    await backend.close()


def reply_summary(call: Any) -> Reply:
    document = json.loads(call.wire_messages()[1]["content"])
    return json.dumps({"summary": f"Summary of {len(document['EVICTED'])} interactions."})


async def test_model_summary_and_fallback(tmp_path: Path, embedder: LocalEmbedder) -> None:
    chat = ScriptedChatModel(reply_summary)
    backend = await open_letta(tmp_path / "a", embedder, chat)
    await write_all(backend)
    assert backend.summary(ALICE) == "Summary of 2 interactions."
    assert backend.stats.model_summaries == 1
    assert chat.calls[0].params["response_format"]["json_schema"]["name"] == "page_summary"
    await backend.close()

    failing = ScriptedChatModel([UpstreamError("down", upstream="local")])
    backend = await open_letta(tmp_path / "b", embedder, failing)
    await write_all(backend)
    assert backend.stats.model_failures == 1 and backend.stats.deterministic_summaries == 1
    assert "Rex" in (backend.summary(ALICE) or "")
    await backend.close()


async def test_core_is_per_user_and_agent(tmp_path: Path, embedder: LocalEmbedder) -> None:
    backend = await open_letta(tmp_path, embedder)
    await write_all(backend, Scope(user="alice", agent="a1"))
    await write_all(backend, Scope(user="bob", agent="a1"))
    assert backend.stats.page_outs == 2
    assert backend.summary(Scope(user="alice", agent="a2")) is None
    bob_hits = await backend.search(Scope(user="bob"), "dog nurse ramen Norway sister", k=10)
    assert bob_hits and all(h.record.scope.user == "bob" for h in bob_hits)
    assert await backend.delete_all(Scope(user="alice")) == 6  # 5 interactions + summary
    assert backend.summary(Scope(user="alice", agent="a1")) is None
    await backend.close()


async def test_model_summarizer_needs_a_model(tmp_path: Path) -> None:
    from dmt_proxy.errors import ConfigError

    with pytest.raises(ConfigError, match="needs a chat model"):
        await create_backend(
            "letta", BackendConfig(state_dir=tmp_path, options={"summarizer": "model"})
        )


async def test_store_failure_at_run_time(tmp_path: Path, embedder: LocalEmbedder) -> None:
    from dmt_proxy.memory.base import MemoryStoreError

    backend = await open_letta(tmp_path, embedder)
    backend._conn.close()  # the real connection, really closed underneath the backend
    with pytest.raises(MemoryStoreError):
        await backend.search(ALICE, "dog", k=3)


async def test_small_memory_fills_k_from_core(tmp_path: Path, embedder: LocalEmbedder) -> None:
    backend = await open_letta(tmp_path, embedder)  # core_size 3, core_hits 1
    records = [MemoryRecord.from_interaction(ALICE, q, a) for q, a in TOPICS[:3]]
    for record in records:
        await backend.write(ALICE, record)
    hits = await backend.search(ALICE, "What is my dog called?", k=5)
    assert hits[0].record.id == records[0].id
    assert {h.record.id for h in hits} == {r.id for r in records}
    await backend.close()
