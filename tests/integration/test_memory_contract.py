"""The MemoryBackend contract, run against every registered backend.

Parametrised over the registry (``known_backends()``: built-ins and entry-point
plug-ins), so a new backend runs the contract the moment it is registered. How
each one is opened is what it declares (``contract_config(env)``, from the
``ContractEnv`` built here); an installed backend that declares none is skipped
with the reason, a built-in one fails.

Real pieces throughout: the real local embedder (loaded once per session), real
mem0 with its on-disk Qdrant store, the langgraph SQLite store, the paging
SQLite store, and PostgreSQL with pgvector (a throwaway server started by
``dmt_proxy/testing/pg.py``, a fresh database per test). The ``memory`` backend is
the shipped in-process fake and runs here with its keyword scoring.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.memory.base import (
    RECORD_SCHEMA_VERSION,
    MemoryBackend,
    MemoryRecord,
    RecordConflict,
    Scope,
)
from dmt_proxy.memory.registry import (
    MEMORY_BACKENDS,
    BackendConfig,
    ContractEnv,
    create_backend,
    known_backends,
)
from dmt_proxy.provenance import AuditStamp, Channel, Provenance, Speaker
from dmt_proxy.tags import AuditStatus, BiasTag

BACKENDS = known_backends()


def contract_config(
    name: str, request: pytest.FixtureRequest, state_dir: Path, embedder: LocalEmbedder
) -> BackendConfig:
    """The config backend ``name`` declares for the contract (a fresh database on request)."""
    env = ContractEnv(state_dir=state_dir, embedder=embedder,
                      database_url=lambda: request.getfixturevalue("pg_dsn"))  # fmt: skip
    try:
        config: BackendConfig = MEMORY_BACKENDS.contract_config(name, env)
    except LookupError as exc:
        if MEMORY_BACKENDS.is_builtin(name):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return config


TAG = BiasTag(
    bias_type="age", target_group="older workers", tendency="disfavoring older", score=0.8
)

FACTS = [
    ("My dog is named Rex and he is a beagle.", "Rex is a lovely name for a beagle."),
    ("I work as a nurse at the hospital in Lyon.", "Nursing is demanding and important work."),
    ("My favourite food is spicy ramen.", "Spicy ramen is a great choice."),
    ("I am planning a trip to Norway next summer.", "Norway has beautiful fjords."),
]

Opener = Callable[..., Awaitable[MemoryBackend]]


@pytest.fixture(scope="session")
def embedder() -> LocalEmbedder:
    model = LocalEmbedder()
    model.embed(["warm up"])
    return model


@pytest.fixture(params=BACKENDS)
async def open_backend(
    request: pytest.FixtureRequest, tmp_path: Path, embedder: LocalEmbedder
) -> AsyncIterator[Opener]:
    name: str = request.param
    opened: list[MemoryBackend] = []

    async def opener(state_dir: Path = tmp_path) -> MemoryBackend:
        config = contract_config(name, request, state_dir, embedder)
        backend = await create_backend(name, config)
        opened.append(backend)
        return backend

    yield opener
    for backend in opened:
        await backend.close()


async def _write_facts(backend: MemoryBackend, scope: Scope) -> list[MemoryRecord]:
    records = [MemoryRecord.from_interaction(scope, q, a) for q, a in FACTS]
    for record in records:
        await backend.write(scope, record)
    return records


def test_every_builtin_backend_declares_its_contract_config() -> None:
    # BACKENDS was read at collection, before any test registered a throwaway backend.
    builtins = [name for name in BACKENDS if MEMORY_BACKENDS.is_builtin(name)]
    assert {"memory", "mem0", "langmem", "letta", "postgres"} <= set(builtins)
    for name in builtins:
        assert callable(getattr(MEMORY_BACKENDS.get(name), "contract_config", None)), name


async def test_relevant_record_first(open_backend: Opener) -> None:
    backend = await open_backend()
    alice = Scope(user="alice")
    records = await _write_facts(backend, alice)
    hits = await backend.search(alice, "What is the name of my dog?", k=3)
    assert hits and hits[0].record.id == records[0].id
    assert hits[0].record.query == FACTS[0][0] and hits[0].record.answer == FACTS[0][1]
    hits = await backend.search(alice, "Which city's hospital do I work at as a nurse?", k=3)
    assert hits[0].record.id == records[1].id


async def test_users_are_isolated(open_backend: Opener) -> None:
    backend = await open_backend()
    alice, bob = Scope(user="alice"), Scope(user="bob")
    mine = await _write_facts(backend, alice)
    bobs = MemoryRecord.from_interaction(bob, "My dog is called Fido.", "Fido is a classic.")
    await backend.write(bob, bobs)
    hits = await backend.search(bob, "What is the name of my dog?", k=10)
    assert [h.record.id for h in hits] == [bobs.id]
    assert await backend.get(bob, mine[0].id) is None
    assert (await backend.get(alice, mine[0].id)) is not None
    assert [r.id for r in await backend.list(bob)] == [bobs.id]
    assert {r.id for r in await backend.list(alice)} == {r.id for r in mine}
    assert await backend.update(bob, mine[0].id, audit_status=AuditStatus.CLEAN, tag=None) is None


async def test_scope_narrowing_by_agent_and_session(open_backend: Opener) -> None:
    backend = await open_backend()
    s1 = Scope(user="carol", agent="planner", session="s1")
    s2 = Scope(user="carol", agent="planner", session="s2")
    r1 = MemoryRecord.from_interaction(s1, "My dog is named Rex.", "Nice.")
    r2 = MemoryRecord.from_interaction(s2, "My dog is named Rex too.", "Nice again.")
    await backend.write(s1, r1)
    await backend.write(s2, r2)
    assert {h.record.id for h in await backend.search(s1, "dog named Rex", k=5)} == {r1.id}
    everything = await backend.search(Scope(user="carol"), "dog named Rex", k=5)
    assert {h.record.id for h in everything} == {r1.id, r2.id}
    assert await backend.search(Scope(user="carol", agent="other"), "dog named Rex", k=5) == []
    assert [r.scope for r in await backend.list(s2)] == [s2]


async def test_write_is_idempotent_on_id(open_backend: Opener) -> None:
    backend = await open_backend()
    alice = Scope(user="alice")
    record = MemoryRecord.from_interaction(alice, "My dog is named Rex.", "Nice name.")
    first = await backend.write(alice, record)
    await backend.write(alice, record)
    changed = record.model_copy(update={"text": "User: My dog is named Max.\nAssistant: Nice."})
    await backend.write(alice, changed)
    listed = await backend.list(alice)
    assert [r.id for r in listed] == [record.id]
    assert listed[0].text == changed.text
    assert listed[0].created_at == first.created_at
    hits = await backend.search(alice, "What is my dog called?", k=5)
    assert [h.record.id for h in hits] == [record.id]


async def test_update_sets_audit_fields(open_backend: Opener) -> None:
    backend = await open_backend()
    alice = Scope(user="alice")
    records = await _write_facts(backend, alice)
    assert records[0].audit_status is AuditStatus.PENDING
    updated = await backend.update(alice, records[0].id, audit_status=AuditStatus.TAGGED, tag=TAG)
    assert updated is not None and updated.audit_status is AuditStatus.TAGGED and updated.tag == TAG
    got = await backend.get(alice, records[0].id)
    assert got is not None and got.tag == TAG and got.text == records[0].text
    hits = await backend.search(alice, "What is the name of my dog?", k=1)
    assert hits[0].record.tag == TAG  # tagged (not quarantined) memories are still retrieved
    cleared = await backend.update(alice, records[0].id, audit_status=AuditStatus.CLEAN, tag=None)
    assert cleared is not None and cleared.tag is None
    assert (
        await backend.update(alice, str(uuid.uuid4()), audit_status=AuditStatus.CLEAN, tag=None)
        is None
    )


PROVENANCE = Provenance(channel=Channel.CHAT, query_by=Speaker.USER, answer_by=Speaker.ASSISTANT,
                        tenant="acme", key_id="0123456789abcdef", request_id="req_1",
                        model="local/qwen2.5-0.5b", received_at=datetime(2026, 11, 1, 9, 30,
                                                                         tzinfo=UTC))  # fmt: skip
STAMP = AuditStamp(policy="default@0123456789ab", auditor="judge_v2+local/qwen2.5-1.5b@auditor_v3",
                   at=datetime(2026, 11, 1, 9, 31, tzinfo=UTC))  # fmt: skip


async def test_provenance_round_trips_with_its_audit_stamp(
    open_backend: Opener, tmp_path: Path
) -> None:
    backend = await open_backend()
    alice = Scope(user="alice", agent="assistant")
    record = MemoryRecord.from_interaction(alice, *FACTS[0], provenance=PROVENANCE)
    bare = MemoryRecord.from_interaction(alice, *FACTS[1])  # stored before provenance existed
    for written in (record, bare):
        await backend.write(alice, written)
    got = await backend.get(alice, record.id)
    assert got is not None and got.provenance == PROVENANCE
    hits = await backend.search(alice, "What is the name of my dog?", k=1)
    assert hits[0].record.provenance == PROVENANCE
    updated = await backend.update(alice, record.id, audit_status=AuditStatus.TAGGED, tag=TAG,
                                   audited=STAMP)  # fmt: skip
    assert updated is not None and updated.provenance == PROVENANCE.stamped(STAMP)
    # A record without provenance gets none from a stamp; no stamp leaves one as it is.
    unstamped = await backend.update(alice, bare.id, audit_status=AuditStatus.CLEAN, tag=None,
                                     audited=STAMP)  # fmt: skip
    assert unstamped is not None and unstamped.provenance is None
    await backend.update(alice, record.id, audit_status=AuditStatus.TAGGED, tag=TAG)
    await backend.close()
    reopened = await open_backend(tmp_path)
    listed = {r.id: r for r in await reopened.list(alice)}
    assert listed[record.id].provenance == PROVENANCE.stamped(STAMP)
    assert listed[record.id].tag == TAG and listed[bare.id].provenance is None


async def test_quarantined_records_are_not_retrieved(open_backend: Opener) -> None:
    backend = await open_backend()
    alice = Scope(user="alice")
    records = await _write_facts(backend, alice)
    await backend.update(alice, records[0].id, audit_status=AuditStatus.QUARANTINED, tag=TAG)
    hits = await backend.search(alice, "What is the name of my dog?", k=10)
    assert records[0].id not in {h.record.id for h in hits}
    hits = await backend.search(
        alice, "What is the name of my dog?", k=10, include_quarantined=True
    )
    assert hits[0].record.id == records[0].id
    got = await backend.get(alice, records[0].id)
    assert got is not None and got.quarantined
    assert records[0].id in {r.id for r in await backend.list(alice)}


async def test_delete_and_delete_all(open_backend: Opener) -> None:
    backend = await open_backend()
    alice, bob = Scope(user="alice"), Scope(user="bob")
    s1, s2 = Scope(user="alice", session="s1"), Scope(user="alice", session="s2")
    in_s1 = MemoryRecord.from_interaction(s1, "My dog is named Rex.", "Nice.")
    in_s2 = MemoryRecord.from_interaction(s2, "My cat is named Tom.", "Nice.")
    bobs = MemoryRecord.from_interaction(bob, "My dog is named Fido.", "Nice.")
    for scope, record in ((s1, in_s1), (s2, in_s2), (bob, bobs)):
        await backend.write(scope, record)
    assert await backend.delete(s2, in_s2.id) is True
    assert await backend.delete(s2, in_s2.id) is False
    assert await backend.get(s2, in_s2.id) is None
    await backend.write(s2, in_s2)
    assert await backend.delete_all(s1) == 1
    assert [r.id for r in await backend.list(alice)] == [in_s2.id]
    assert await backend.delete_all(alice) == 1
    assert await backend.list(alice) == []
    assert await backend.search(alice, "dog", k=5) == []
    assert [r.id for r in await backend.list(bob)] == [bobs.id]


async def test_other_scopes_cannot_touch_a_record(open_backend: Opener) -> None:
    """Every by-id call takes a scope: at one that does not see the record, it finds
    nothing and changes nothing (another user, or the same user's other session)."""
    backend = await open_backend()
    owner = Scope(user="alice", session="s1")
    record = MemoryRecord.from_interaction(owner, "My dog is named Rex.", "Nice.")
    await backend.write(owner, record)
    for other in (Scope(user="bob"), Scope(user="alice", session="s2"), Scope(user="Alice")):
        assert await backend.get(other, record.id) is None
        assert (
            await backend.update(other, record.id, audit_status=AuditStatus.TAGGED, tag=TAG) is None
        )
        assert await backend.delete(other, record.id) is False
    kept = await backend.get(owner, record.id)
    assert kept is not None and kept.audit_status is AuditStatus.PENDING and kept.tag is None
    assert await backend.get(Scope(user="alice"), record.id) == kept  # the user sees all sessions
    assert [h.record.id for h in await backend.search(owner, "dog named Rex", k=3)] == [record.id]
    assert await backend.scope_of(record.id) == owner
    assert await backend.scope_of(str(uuid.uuid4())) is None
    assert await backend.delete(Scope(user="alice"), record.id) is True
    assert await backend.scope_of(record.id) is None


async def test_survives_close_and_reopen(open_backend: Opener, tmp_path: Path) -> None:
    backend = await open_backend()
    alice = Scope(user="alice", agent="assistant")
    records = await _write_facts(backend, alice)
    await backend.update(alice, records[1].id, audit_status=AuditStatus.TAGGED, tag=TAG)
    await backend.close()
    reopened = await open_backend(tmp_path)
    listed = await reopened.list(alice)
    assert [r.id for r in listed] == [r.id for r in records]
    assert [r.created_at for r in listed] == [r.created_at for r in records]
    assert listed[1].tag == TAG and listed[1].audit_status is AuditStatus.TAGGED
    hits = await reopened.search(alice, "What is the name of my dog?", k=2)
    assert hits[0].record.id == records[0].id
    # Every record is read back with the format version it was written with (issue 9, item 5).
    assert {r.schema_version for r in listed} == {RECORD_SCHEMA_VERSION}
    assert hits[0].record.schema_version == RECORD_SCHEMA_VERSION


async def test_rejects_bad_writes(open_backend: Opener) -> None:
    backend = await open_backend()
    alice, bob = Scope(user="alice"), Scope(user="bob")
    record = MemoryRecord.from_interaction(alice, "My dog is named Rex.", "Nice.")
    with pytest.raises(ValueError, match="carries scope"):
        await backend.write(bob, record)
    await backend.write(alice, record)
    with pytest.raises(RecordConflict):
        await backend.write(bob, record.model_copy(update={"scope": bob}))
    assert await backend.search(alice, "dog", k=0) == []
    assert await backend.search(alice, "   ", k=3) == []
    with pytest.raises(ValueError):
        await backend.search(alice, "dog", k=-1)


USERS = st.sampled_from(["ann", "ben", "cy", "ann smith", "Ann", "ben.b", "日本"])
WRITES = st.lists(st.tuples(USERS, st.sampled_from([f for f, _ in FACTS])), min_size=1, max_size=8)


@pytest.mark.parametrize("name", BACKENDS)
def test_isolation_property(
    name: str, tmp_path: Path, embedder: LocalEmbedder, request: pytest.FixtureRequest
) -> None:
    """Interleaved writes by random users: nobody ever reads another user's record."""
    config = contract_config(name, request, tmp_path, embedder)
    loop = asyncio.new_event_loop()
    backend = loop.run_until_complete(create_backend(name, config))
    owner: dict[str, str] = {}

    @settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
    @given(writes=WRITES, probe=USERS)
    def check(writes: list[tuple[str, str]], probe: str) -> None:
        async def run() -> None:
            for user, text in writes:
                record = MemoryRecord.from_interaction(Scope(user=user), text, "ok")
                owner[record.id] = user
                await backend.write(Scope(user=user), record)
            for user in {probe, *(u for u, _ in writes)}:
                scope = Scope(user=user)
                for hit in await backend.search(scope, "my dog, my job, my food, my trip", k=20):
                    assert hit.record.scope.user == user
                    assert owner.get(hit.record.id, user) == user
                listed = await backend.list(scope)
                assert all(r.scope.user == user for r in listed)
                mine = {rid for rid, u in owner.items() if u == user}
                assert mine <= {r.id for r in listed}

        loop.run_until_complete(run())

    try:
        check()
    finally:
        loop.run_until_complete(backend.close())
        loop.close()
