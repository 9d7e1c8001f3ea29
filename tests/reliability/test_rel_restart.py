"""Restart: what the production store (real mem0 on disk, no fakes) holds is read back
unchanged by a new process-equivalent open of the same state directory."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.tags import AuditStatus, BiasTag

pytestmark = pytest.mark.slow


def comparable(record: MemoryRecord) -> dict[str, object]:
    data = record.model_dump(mode="json", exclude={"updated_at"})
    return data


async def test_mem0_state_survives_close_and_reopen(tmp_path: Path) -> None:
    config = BackendConfig(state_dir=tmp_path)
    tag = BiasTag(bias_type="age", target_group="older workers", tendency="favoring youth",
                  score=0.8, rationale="stereotype", auditor="scripted@fake")  # fmt: skip
    alice, bob = Scope(user="tenant-a/alice"), Scope(user="bob", session="s1")
    when = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
    records = [
        MemoryRecord.from_interaction(alice, "My sister is Zanele.", "Noted.", id="mem_1",
                                      created_at=when, audit_status=AuditStatus.CLEAN,
                                      metadata={"request_id": "req_1", "mode": "dmt"}),
        MemoryRecord.from_interaction(alice, "Older staff never learn.", "Hm.", id="mem_2",
                                      created_at=when, audit_status=AuditStatus.TAGGED, tag=tag),
        MemoryRecord.from_interaction(bob, "Pending one.", "Ok.", id="mem_3", created_at=when),
    ]  # fmt: skip
    backend = await create_backend("mem0", config)
    for record in records:
        await backend.write(record.scope, record)
    await backend.update(alice, "mem_1", audit_status=AuditStatus.CLEAN, tag=None)
    await backend.close()

    reopened = await create_backend("mem0", config)
    try:
        got = {r.id: r for scope in (alice, bob) for r in await reopened.list(scope)}
        assert {k: comparable(v) for k, v in got.items()} == {r.id: comparable(r) for r in records}
        hits = await reopened.search(alice, "What is my sister called?", 1)
        assert [h.record.id for h in hits] == ["mem_1"]
    finally:
        await reopened.close()
