"""The memory seam: explicit scopes, stored records and the async backend protocol.

Every call names its ``Scope``; nothing defaults to "all users". A record is the
interaction ``(q_t, r_t)`` stored verbatim by default (paper §4.1:
``M_t <- M_{t-1} ∪ {(q_t, r_t)}``) plus room for the audit status and bias tag
that Dynamic Memory Tagging fills in later (paper §6.2).

Visibility rule shared by all backends: a record written at scope ``W`` is visible
to a query at scope ``Q`` when ``Q.user == W.user`` and every part ``Q`` names
(agent, session) equals the record's. ``Scope(user="u")`` therefore sees all of
u's memories; ``Scope(user="u", session="s")`` only those written in session s.
Reads, updates and deletes by id follow the same rule: at a scope that does not
see the record they find nothing and change nothing. ``scope_of(id)`` is the one
lookup by id alone (the admin API names memories by id).

Erasure: a backend that keeps a user's text anywhere ``delete_all`` leaves it (a
history, a write-ahead log, free pages of a file) also implements ``erase(user)``
(``ErasingBackend``): every record of the user deleted, and their text removed from
every file or table the store writes; it answers a ``StoreErasure`` saying what it
compacted and what it could not clear. Every built-in backend does.

Errors: ``MemoryStoreError`` wraps a store that fails at run time (the proxy
catches it, answers without memory and keeps the write for retry; its subclass
``StoreClosed``: a backend used after ``close()``); a write whose id already
belongs to another user raises ``RecordConflict`` (a caller bug).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, ClassVar, Protocol, runtime_checkable

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from dmt_proxy.errors import DmtError
from dmt_proxy.provenance import AuditStamp, Provenance
from dmt_proxy.tags import AuditStatus, BiasTag

MAX_SCOPE_PART = 256
MAX_RECORD_ID = 128
MAX_TEXT_CHARS = 100_000

INTERACTION_FORMAT_V1 = "User: {query}\nAssistant: {answer}"
"""How an interaction (q_t, r_t) is rendered into the stored text (version 1)."""

CUT_MARKER = " […]"
"""Ends a text cut to fit ``MAX_TEXT_CHARS``, so the cut is visible."""


_STORED = "dmt_stored_record"
RECORD_SCHEMA_VERSION = 3
"""Format of a stored record, written with it by every backend. Records stored before the
field existed are format 1 (the field's default), so a later release can tell what it reads.
Format 2 (tag format 2, ``dmt_proxy.tags``): the status may be ``disputed`` and the tag may
carry findings and have no ``bias_type``; format-1 records read unchanged. Format 3: the
record may carry its ``provenance`` (``dmt_proxy.provenance``); older records read with
none."""


class MemoryStoreError(DmtError):
    """The memory store failed at run time (disk, lock, corrupt data)."""


class StoreClosed(MemoryStoreError):
    """The backend was closed; it reads and writes nothing more."""


class RecordConflict(DmtError, ValueError):
    """A record id that already exists under another user was written again."""


def interaction_text(query: str, answer: str) -> str:
    """The stored memory text of an interaction ``(q_t, r_t)`` (paper §4.1), the one format.

    Cut to ``MAX_TEXT_CHARS`` with a visible marker: a longer text (a 3 MB message is
    a legal request) would fail record validation on every retry, forever.
    """
    text = INTERACTION_FORMAT_V1.format(query=query, answer=answer)
    if len(text) > MAX_TEXT_CHARS:
        text = text[: MAX_TEXT_CHARS - len(CUT_MARKER)] + CUT_MARKER
    return text


def _digest(*parts: str | None) -> str:
    # json.dumps keeps None distinct from "None" and "a","b" distinct from "a,b".
    return hashlib.sha256(json.dumps(parts).encode("utf-8")).hexdigest()[:32]


class Scope(BaseModel):
    """Who a memory belongs to: a user, optionally narrowed to an agent and a session."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    user: str = Field(min_length=1, max_length=MAX_SCOPE_PART)
    agent: str | None = Field(default=None, min_length=1, max_length=MAX_SCOPE_PART)
    session: str | None = Field(default=None, min_length=1, max_length=MAX_SCOPE_PART)

    @field_validator("user", "agent", "session")
    @classmethod
    def _printable(cls, value: str | None) -> str | None:
        if value is None:
            return value
        if not value.strip():
            raise ValueError("must not be blank")
        if any(ord(ch) < 32 or ord(ch) == 127 for ch in value):
            raise ValueError("must not contain control characters")
        return value

    @property
    def key(self) -> str:
        """Stable 32-hex id of the full scope, safe as a namespace or collection name."""
        return _digest("scope", self.user, self.agent, self.session)

    @property
    def user_key(self) -> str:
        """Stable 32-hex id of the user alone (partition key: one user never sees another)."""
        return _digest("user", self.user)

    @property
    def agent_key(self) -> str | None:
        return None if self.agent is None else _digest("agent", self.agent)

    @property
    def session_key(self) -> str | None:
        return None if self.session is None else _digest("session", self.session)

    def sees(self, owner: Scope) -> bool:
        """Whether a query at this scope may see a record written at ``owner``."""
        return (
            self.user == owner.user
            and (self.agent is None or self.agent == owner.agent)
            and (self.session is None or self.session == owner.session)
        )


def _now() -> datetime:
    return datetime.now(UTC)


class MemoryRecord(BaseModel):
    """One stored memory with its audit state."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(
        default_factory=lambda: str(uuid.uuid4()), min_length=1, max_length=MAX_RECORD_ID
    )
    """Caller-chosen and globally unique; writing the same id again updates the record."""
    scope: Scope
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS)
    """What is embedded and retrieved: the rendered interaction by default."""
    query: str | None = None
    answer: str | None = None
    created_at: datetime = Field(default_factory=_now)
    updated_at: datetime | None = None
    audit_status: AuditStatus = AuditStatus.PENDING
    tag: BiasTag | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    provenance: Provenance | None = None
    """Who wrote it, through which door, and what audited it, stamped by the proxy
    (``None``: stored before provenance existed, or derived from several writes by a
    consolidating backend)."""
    schema_version: int = Field(default=RECORD_SCHEMA_VERSION, ge=1)
    """The record format it was written with: ``RECORD_SCHEMA_VERSION`` for records built by
    this release, 1 for a stored body that predates the field (see ``model_validate``)."""

    # Built with the constructor: the current format. Read back from a store
    # (model_validate / model_validate_json): a body without the field predates it.
    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> MemoryRecord:
        """Validate a stored record; a body without ``schema_version`` is format 1."""
        kwargs["context"] = {**(kwargs.get("context") or {}), _STORED: True}
        return super().model_validate(obj, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> MemoryRecord:
        """Validate a stored record's JSON; a body without ``schema_version`` is format 1."""
        kwargs["context"] = {**(kwargs.get("context") or {}), _STORED: True}
        return super().model_validate_json(json_data, **kwargs)

    @model_validator(mode="before")
    @classmethod
    def _legacy_format(cls, data: Any, info: ValidationInfo) -> Any:
        stored = bool(info.context and info.context.get(_STORED))
        if stored and isinstance(data, dict) and "schema_version" not in data:
            return {**data, "schema_version": 1}
        return data

    @model_validator(mode="after")
    def _consistent(self) -> MemoryRecord:
        if self.audit_status.needs_tag and self.tag is None:
            raise ValueError(f"audit_status '{self.audit_status.value}' requires a tag")
        if self.updated_at is None:
            object.__setattr__(self, "updated_at", self.created_at)
        return self

    def spoken(self) -> tuple[str, str]:
        """(the user's words, the assistant's) as the proxy stored them apart; a record
        written as one text (a backfill, the admin API) is the user's words alone."""
        if not self.query:
            return self.text, ""
        return self.query, self.answer or ""

    @classmethod
    def from_interaction(cls, scope: Scope, query: str, answer: str, **fields: Any) -> MemoryRecord:
        """A record holding the interaction (q_t, r_t) verbatim, as the paper stores it."""
        text = interaction_text(query, answer)
        return cls(scope=scope, text=text, query=query, answer=answer, **fields)

    @property
    def quarantined(self) -> bool:
        return self.audit_status is AuditStatus.QUARANTINED


class SearchHit(BaseModel):
    """A retrieved record and its similarity score (higher is more similar)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    record: MemoryRecord
    score: float


class AuditState(BaseModel):
    """An audit status with its tag, as carried by a record."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: AuditStatus
    tag: BiasTag | None = None


_SEVERITY: dict[AuditStatus, int] = {
    AuditStatus.CLEAN: 0,
    AuditStatus.UNAUDITED: 1,
    AuditStatus.PENDING: 2,
    AuditStatus.FAILED: 3,
    AuditStatus.DISPUTED: 4,
    AuditStatus.TAGGED: 5,
    AuditStatus.QUARANTINED: 6,
}


def combine_audit(states: Iterable[AuditState]) -> AuditState:
    """Audit state of a memory derived from ``states`` (consolidation, summaries).

    A derived memory is never cleaner than its dirtiest source: the status is the
    most severe one (clean < unaudited < pending < failed < disputed < tagged <
    quarantined)
    and the tag is the highest-scoring tag among the sources. No sources: clean.
    """
    status = AuditStatus.CLEAN
    tag: BiasTag | None = None
    for state in states:
        if _SEVERITY[state.status] > _SEVERITY[status]:
            status = state.status
        if state.tag is not None and (tag is None or state.tag.score > tag.score):
            tag = state.tag
    if status.needs_tag and tag is None:
        status = AuditStatus.FAILED  # unreachable with valid records; never report clean
    return AuditState(status=status, tag=tag)


@runtime_checkable
class MemoryBackend(Protocol):
    """A long-term memory store addressed by explicit scope. All methods are async.

    ``write`` is idempotent on ``record.id``: writing an id again updates that
    record in place and never duplicates it (the write outbox relies on this for
    at-least-once delivery). Quarantined records are left out of ``search``
    unless ``include_quarantined`` is set; ``get``/``list`` always return them.
    """

    name: ClassVar[str]

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        """Up to ``k`` records visible to ``scope``, most relevant first."""
        ...

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        """Store (or update, same id) ``record`` under ``scope``; returns what was stored."""
        ...

    async def update(
        self,
        scope: Scope,
        id: str,
        *,
        audit_status: AuditStatus,
        tag: BiasTag | None,
        audited: AuditStamp | None = None,
    ) -> MemoryRecord | None:
        """Set the audit fields of record ``id``; ``None`` if absent or not visible to ``scope``.

        ``audited``: what decided them, stamped on the record's provenance (a record without
        provenance stays without; ``None`` leaves the provenance as it is)."""
        ...

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        """Record ``id`` if it exists and is visible to ``scope``."""
        ...

    async def scope_of(self, id: str) -> Scope | None:
        """The scope record ``id`` was written under (``None`` if absent).

        The one lookup by id alone, for the admin API, which names a memory by id: the
        caller then reads or deletes it under the scope returned.
        """
        ...

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        """Records visible to ``scope``, oldest first."""
        ...

    async def delete(self, scope: Scope, id: str) -> bool:
        """Delete record ``id`` if it is visible to ``scope``; whether something was deleted."""
        ...

    async def delete_all(self, scope: Scope) -> int:
        """Delete every record visible to ``scope``; how many were deleted."""
        ...

    async def close(self) -> None:
        """Release files and locks; the backend is unusable afterwards."""
        ...


class StoreErasure(BaseModel):
    """What a backend's ``erase(user)`` did."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    deleted: int
    """Records of the user deleted."""
    compacted: list[str] = Field(default_factory=list)
    """Files and tables rewritten so that the deleted text is not left in them."""
    kept: list[str] = Field(default_factory=list)
    """Where the user's text may still be, in words (a limit the backend cannot clear)."""


@runtime_checkable
class ErasingBackend(Protocol):
    """A backend that can erase a user: ``delete_all`` and more (module docstring)."""

    async def erase(self, user: str, *, full: bool = False) -> StoreErasure:
        """Delete every record of ``user`` and remove their text from every file or table
        the store writes (histories, logs, free space). ``full``: also where that is
        costly (PostgreSQL: ``VACUUM FULL``, which locks the table while it rewrites it)."""
        ...


def check_write(scope: Scope, record: MemoryRecord) -> None:
    """Reject a write whose record names another scope (a caller bug)."""
    if record.scope != scope:
        raise ValueError(
            f"record {record.id} carries scope {record.scope!r} but was written under {scope!r}"
        )


def check_k(k: int) -> None:
    """Reject a negative ``k`` (a caller bug)."""
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")


def nothing_to_search(query: str, k: int) -> bool:
    """Whether a search for ``query`` can only find nothing (``k`` of 0, a blank query)."""
    check_k(k)
    return k == 0 or not query.strip()


def with_audit(
    record: MemoryRecord,
    status: AuditStatus,
    tag: BiasTag | None,
    audited: AuditStamp | None = None,
) -> MemoryRecord:
    """A copy of ``record`` with new audit fields and ``updated_at`` set to now (validated);
    ``audited`` is stamped on its provenance (``stamped_provenance``)."""
    data = record.model_dump()
    data.update(audit_status=status, tag=tag, updated_at=_now(),
                provenance=stamped_provenance(record.provenance, audited),
                schema_version=RECORD_SCHEMA_VERSION)  # fmt: skip
    return MemoryRecord.model_validate(data)


def stamped_provenance(
    provenance: Provenance | None, audited: AuditStamp | None
) -> Provenance | None:
    """``provenance`` with ``audited`` as its last audit: the one rule every backend's
    ``update`` follows. No provenance: none is invented for a stamp (the review trail keeps
    the audit either way); no stamp: the provenance is left as it is."""
    if provenance is None or audited is None:
        return provenance
    return provenance.stamped(audited)
