"""``erase(user)`` on every registered backend: after it, no file under the store's state
directory holds the user's text (nor, for PostgreSQL, any column of the database), and
the other user's records are intact. Every built-in backend erases (``ErasingBackend``).

Each backend is opened as the contract tests open it (``contract_config``: the real
local embedder, mem0 on disk, the langgraph and paging SQLite stores, a throwaway
PostgreSQL with pgvector; the ``memory`` fake with a snapshot file). Before the erasure
the user's text is put where a store keeps it longest: written, rewritten under the same
id (mem0's history keeps both texts), one record deleted alone before (its history
stays with mem0), enough records for the paging store to page out and summarise, and
the store closed and opened again (the in-memory store's snapshot).
"""

from __future__ import annotations

import secrets
import string
from pathlib import Path

import pytest

from dmt_proxy.memory.base import ErasingBackend, MemoryRecord, Scope
from dmt_proxy.memory.registry import MEMORY_BACKENDS, create_backend, known_backends
from tests.integration.test_erasure import files_with
from tests.integration.test_erasure_postgres import database_rows_with
from tests.integration.test_memory_contract import contract_config
from tests.integration.test_memory_contract import embedder as embedder  # a fixture

ALICE, BOB = Scope(user="alice"), Scope(user="bob", agent="helper")


def unique() -> str:
    return "zq" + "".join(secrets.choice(string.ascii_lowercase) for _ in range(22))


@pytest.mark.parametrize("name", known_backends())
async def test_erase_leaves_no_byte_of_the_user(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, embedder: object
) -> None:
    config = contract_config(name, request, tmp_path, embedder)  # type: ignore[arg-type]
    if name == "memory":  # the fake persists only when asked to
        config = type(config)(state_dir=tmp_path, embedder=config.embedder,
                              options={**config.options, "persist": True})  # fmt: skip
    secret, other = unique(), unique()
    backend = await create_backend(name, config)
    try:
        assert isinstance(backend, ErasingBackend) or not MEMORY_BACKENDS.is_builtin(name)
        if not isinstance(backend, ErasingBackend):
            pytest.skip(f"{name} does not erase (a plug-in): the service only deletes")
        first = MemoryRecord(scope=ALICE, text=f"My first note about {secret}.")
        await backend.write(ALICE, first)
        await backend.write(ALICE, first.model_copy(update={"text": f"Rewritten: {secret}!"}))
        gone = await backend.write(ALICE, MemoryRecord(scope=ALICE, text=f"Gone {secret}."))
        assert await backend.delete(ALICE, gone.id)
        for i in range(12):  # the paging store pages out and summarises after 10
            await backend.write(ALICE, MemoryRecord.from_interaction(
                ALICE, f"Fact {i}: {secret} likes tea number {i}.", "Noted."))  # fmt: skip
        kept = await backend.write(BOB, MemoryRecord(scope=BOB, text=f"Bob's note {other}."))
    finally:
        await backend.close()
    backend = await create_backend(name, config)  # opened again: snapshots, reloaded indexes
    try:
        assert isinstance(backend, ErasingBackend)
        if name == "postgres":  # where the text is before: the test means something
            assert database_rows_with(str(config.options["dsn"]), secret) != []
        else:
            assert files_with(tmp_path, secret) != []
        erased = await backend.erase("alice")
        assert erased.deleted >= 13
        assert await backend.list(ALICE) == []
        assert [r.id for r in await backend.list(Scope(user="bob"))] == [kept.id]
        assert files_with(tmp_path, secret) == [], erased
        if name == "postgres":
            dsn = str(config.options["dsn"])
            assert database_rows_with(dsn, secret) == []
            assert database_rows_with(dsn, other) != []
        else:
            assert files_with(tmp_path, other) != []
        await backend.write(ALICE, MemoryRecord(scope=ALICE, text="After the erasure."))
        assert [r.text for r in await backend.list(ALICE)] == ["After the erasure."]
    finally:
        await backend.close()
