"""The one entry type and its two wire shapes: the admin API's and the review API's.

Both are computed from the same ``MemoryEntry``; these pin what each writes: what it has
always written, and ``provenance`` after it (``null`` for a record without one).
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import TypeAdapter

from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.entry import MemoryEntry, ReviewedEntry
from dmt_proxy.tags import AuditStatus, BiasTag

WHEN = datetime(2026, 11, 1, 9, 30, tzinfo=UTC)
TAG = BiasTag(bias_type="age", target_group="older workers", tendency="favoring youth", score=0.8)
RECORD = MemoryRecord.from_interaction(Scope(user="alice", session="s1"), "Old people are slow.",
                                       "Noted.", id="mem_1", created_at=WHEN,
                                       audit_status=AuditStatus.TAGGED, tag=TAG)  # fmt: skip


def test_the_admin_api_shape_is_the_entrys_own_dump() -> None:
    entry = MemoryEntry.of(RECORD)
    assert entry.query == "Old people are slow." and entry.updated_at == WHEN
    dumped = entry.model_dump(mode="json")
    assert list(dumped) == ["id", "user", "text", "created_at", "audit_status", "tag",
                            "provenance"]  # fmt: skip
    assert dumped["provenance"] is None
    assert dumped["user"] == "alice" and dumped["created_at"] == "2026-11-01T09:30:00+00:00"
    assert MemoryEntry.model_validate(dumped).model_dump(mode="json") == dumped  # the demo reads it


def test_the_review_api_shape_is_computed_from_the_same_entry() -> None:
    reviewed = TypeAdapter(ReviewedEntry)
    dumped = reviewed.dump_python(MemoryEntry.of(RECORD), mode="json")
    assert list(dumped) == ["id", "user", "text", "query", "created_at", "updated_at",
                            "audit_status", "tag", "provenance"]  # fmt: skip
    assert dumped["query"] == "Old people are slow." and dumped["audit_status"] == "tagged"
    assert dumped["created_at"] == dumped["updated_at"] == "2026-11-01T09:30:00Z"
    schema = reviewed.json_schema(mode="serialization")
    assert schema["title"] == "MemoryView" and schema["additionalProperties"] is False
    assert schema["required"] == ["id", "user", "text", "created_at", "audit_status"]
