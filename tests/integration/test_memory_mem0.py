"""mem0 backend specifics on the real mem0 library and its on-disk Qdrant store."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.mem0_backend import Mem0Backend
from dmt_proxy.memory.base import MemoryRecord, MemoryStoreError, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.tags import AuditStatus

ALICE, BOB = Scope(user="alice smith"), Scope(user="bob")


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Mem0Backend]:
    opened = await create_backend("mem0", BackendConfig(state_dir=tmp_path))
    assert isinstance(opened, Mem0Backend)
    yield opened
    await opened.close()


async def test_offline_and_verbatim(backend: Mem0Backend, tmp_path: Path) -> None:
    import mem0.memory.telemetry as telemetry

    assert os.environ["MEM0_TELEMETRY"] == "False" and telemetry.MEM0_TELEMETRY is False
    record = MemoryRecord.from_interaction(ALICE, "My dog is named Rex.", "Nice name!")
    await backend.write(ALICE, record)
    raw = backend._memory.get_all(filters={"user_id": ALICE.user_key})["results"]
    assert [item["memory"] for item in raw] == [record.text]  # infer=False: stored verbatim
    assert raw[0]["metadata"]["dmt_user"] == "alice smith"  # mem0 ids reject spaces: hashed
    assert (tmp_path / "memory" / "mem0" / "history.db").is_file()
    assert (tmp_path / "memory" / "mem0" / "qdrant").is_dir()


async def test_one_collection_per_user(backend: Mem0Backend) -> None:
    for scope in (ALICE, BOB, ALICE):
        await backend.write(scope, MemoryRecord.from_interaction(scope, "My dog is Rex.", "ok"))
    names = {c.name for c in backend._parts.client.get_collections().collections}
    assert {f"dmt__u_{ALICE.user_key}", f"dmt__u_{BOB.user_key}"} <= names
    assert backend._parts.size(ALICE.user_key) == 2 and backend._parts.size(BOB.user_key) == 1


async def test_threshold_is_explicit(tmp_path: Path) -> None:
    strict = await create_backend(
        "mem0", BackendConfig(state_dir=tmp_path, options={"threshold": 0.95})
    )
    record = MemoryRecord.from_interaction(ALICE, "My dog is named Rex.", "Nice name!")
    await strict.write(ALICE, record)
    assert await strict.search(ALICE, "What is my dog called?", k=3) == []
    await strict.close()
    loose = await create_backend("mem0", BackendConfig(state_dir=tmp_path))
    assert [h.record.id for h in await loose.search(ALICE, "What is my dog called?", k=3)] == [
        record.id
    ]
    await loose.close()


async def test_second_client_on_same_path_is_refused(backend: Mem0Backend, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="one client per path"):
        await create_backend("mem0", BackendConfig(state_dir=tmp_path))


async def test_store_failure_at_run_time(backend: Mem0Backend) -> None:
    backend._parts.client.close()  # the real client, really closed underneath the backend
    with pytest.raises(MemoryStoreError):
        await backend.write(ALICE, MemoryRecord.from_interaction(ALICE, "q", "a"))


class WordEmbedder:
    """A tiny deterministic embedder (one dimension per known word), standing in for
    the process's shared embedder so the test can see which embedder mem0 uses."""

    WORDS = ("apple", "banana", "cherry")

    def __init__(self) -> None:
        self.calls = 0

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.calls += 1
        vectors = []
        for text in texts:
            v = [1.0 if w in text.lower() else 0.0 for w in self.WORDS] + [0.01]
            v += [0.0] * (384 - len(v))
            norm = sum(x * x for x in v) ** 0.5
            vectors.append([x / norm for x in v])
        return vectors


async def test_uses_the_shared_embedder_and_audits_without_re_embedding(tmp_path: Path) -> None:
    embedder = WordEmbedder()
    config = BackendConfig(state_dir=tmp_path, embedder=embedder)
    backend = await create_backend("mem0", config)
    try:
        alice = Scope(user="alice")
        records = [MemoryRecord.from_interaction(alice, f"I like {w}s.", "Noted.")
                   for w in WordEmbedder.WORDS]  # fmt: skip
        for record in records:
            await backend.write(alice, record)
        hits = await backend.search(alice, "banana", k=3)
        assert hits[0].record.id == records[1].id  # ranked by the given embedder
        calls = embedder.calls
        assert calls >= len(records) + 1  # mem0 embedded with it, not a model of its own
        await backend.update(alice, records[0].id, audit_status=AuditStatus.CLEAN, tag=None)
        assert embedder.calls == calls  # an audit result changes metadata only
        listed = {r.id: r for r in await backend.list(alice)}
        assert listed[records[0].id].audit_status is AuditStatus.CLEAN
        hits = await backend.search(alice, "apple", k=1)
        assert hits[0].record.id == records[0].id
    finally:
        await backend.close()


async def test_top_k_is_the_cosine_top_k(tmp_path: Path) -> None:
    """Fetching only k semantic candidates (not mem0's 60) still returns the true top k."""
    from dmt_proxy.embedder import LocalEmbedder

    embedder = LocalEmbedder()
    backend = await create_backend("mem0", BackendConfig(state_dir=tmp_path, embedder=embedder))
    try:
        alice = Scope(user="alice")
        topics = ["my dog Rex", "the beagle's vet visit", "spicy ramen", "a trip to Norway",
                  "nursing shifts in Lyon", "learning the violin", "my cat Tom", "fjords",
                  "hospital night work", "dog training classes", "noodle soup recipes",
                  "a puppy named Max"]  # fmt: skip
        records = [MemoryRecord.from_interaction(alice, f"Tell me about {t}.", "Sure.")
                   for t in topics]  # fmt: skip
        for record in records:
            await backend.write(alice, record)
        query = "What is my dog's name?"
        q = embedder.embed([query])[0]
        vectors = embedder.embed([r.text for r in records])
        cos = [sum(a * b for a, b in zip(q, v, strict=True)) for v in vectors]
        expected = [records[i].id for i in sorted(range(len(records)), key=lambda i: -cos[i])[:3]]
        hits = await backend.search(alice, query, k=3)
        assert [h.record.id for h in hits] == expected
    finally:
        await backend.close()
