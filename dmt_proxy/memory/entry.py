"""One memory as every reader sees it: the admin API, the review API and console, the MCP
tools, the renderer and the demo all read a ``MemoryEntry``.

An entry is made in one place, ``MemoryEntry.of``, from the record the backend holds or
the record a queued write will become (``OutboxItem.record``). What readers show of it
they compute from it, never from a copy of its fields: the admin API's JSON is the
entry's own dump; the review API's older shape (``MemoryView``: the user's words, the
last update, times as pydantic writes them) is computed by ``ReviewedEntry``'s
serializer; the renderer and the console templates read its attributes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, NotRequired

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, field_serializer, with_config

# Before Python 3.12 pydantic reads only typing_extensions' TypedDict (pydantic depends on it).
from typing_extensions import TypedDict

from dmt_proxy.memory.base import MemoryRecord
from dmt_proxy.provenance import Provenance
from dmt_proxy.tags import AuditStatus, BiasTag


class MemoryEntry(BaseModel):
    """One memory as the service returns it and the admin API serves it (``/v1/memories``):
    stored in the backend, or acknowledged and queued. ``model_dump(mode="json")`` is the
    wire shape, field for field."""

    # Every field is on the wire, defaults included: the API document says so.
    model_config = ConfigDict(
        frozen=True, extra="forbid", json_schema_serialization_defaults_required=True
    )

    id: str
    user: str
    text: str
    created_at: datetime
    audit_status: AuditStatus
    tag: BiasTag | None = None
    provenance: Provenance | None = None
    """Who wrote it, through which door, and what audited it (``dmt_proxy.provenance``);
    ``None`` for a memory stored before provenance existed or derived from several."""
    # Shown by the review API and the console, never by /v1/memories (its shape predates them).
    query: str | None = Field(default=None, exclude=True)
    updated_at: datetime | None = Field(default=None, exclude=True)

    @field_serializer("created_at")
    def _iso(self, created_at: datetime) -> str:
        # Python's isoformat ("+00:00"), as the API has always written it, not pydantic's "Z".
        return created_at.isoformat()

    @classmethod
    def of(cls, record: MemoryRecord) -> MemoryEntry:
        """The entry of ``record`` (stored, or the one a queued write will store)."""
        return cls(id=record.id, user=record.scope.user, text=record.text,
                   created_at=record.created_at, audit_status=record.audit_status,
                   tag=record.tag, provenance=record.provenance, query=record.query,
                   updated_at=record.updated_at)  # fmt: skip


@with_config(ConfigDict(extra="forbid"))
class MemoryView(TypedDict):
    """One stored memory as a reviewer sees it."""

    id: str
    user: str
    text: str
    query: NotRequired[str | None]
    created_at: datetime
    updated_at: NotRequired[datetime | None]
    audit_status: AuditStatus
    tag: NotRequired[BiasTag | None]
    provenance: NotRequired[Provenance | None]


def reviewed(entry: MemoryEntry) -> MemoryView:
    """The review API's JSON of ``entry`` (documented as ``MemoryView``)."""
    return MemoryView(id=entry.id, user=entry.user, text=entry.text, query=entry.query,
                      created_at=entry.created_at, updated_at=entry.updated_at,
                      audit_status=entry.audit_status, tag=entry.tag,
                      provenance=entry.provenance)  # fmt: skip


ReviewedEntry = Annotated[MemoryEntry, PlainSerializer(reviewed, return_type=MemoryView)]
"""An entry in the review API's answers: read as the entry, written as ``MemoryView``."""
