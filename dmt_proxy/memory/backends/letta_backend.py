"""``letta``: Letta/MemGPT-style paging memory, built locally (no Letta server).

MemGPT keeps a bounded *core* context in the prompt and pages the overflow out
to an *archival* store that the agent searches on demand, folding evicted
messages into a recursive summary. Here, per (user, agent):

* core: the ``core_size`` most recent interactions plus one running-summary record;
* on overflow the oldest ``page_size`` interactions move to archival (one
  transaction), then the summary is rewritten from the previous summary and the
  evicted interactions (``summary_{t} = f(summary_{t-1}, evicted_t)``) by the chat
  model (prompt ``page_summary_v1``), or by a deterministic clipper when no model
  is configured or its reply is unusable. Evicted rows stay flagged until the
  summary that covers them is stored, so a crash in between is caught up at the
  next page-out;
* ``search`` returns core records first (up to ``core_hits``, ranked by
  similarity), then archival hits by similarity (``min_score``), then the rest
  of the core, up to ``k``.

Storage: one SQLite file ``<state_dir>/memory/letta/paging.sqlite`` with the
record JSON and its float32 embedding; archival vectors are held per user in a
numpy matrix (built on first search, kept up to date after).

Erasure (``erase(user)``): every row of the user (core, archival, summaries and their
sources' audit snapshots) is deleted and the file compacted (WAL truncated,
``VACUUM``); the connection deletes with ``secure_delete`` on.

The summary inherits the audit state of every interaction folded into it
(``combine_audit`` over per-source snapshots, updated when a source is audited
later), so a tag on a paged-out interaction still reaches the summary.

A real Letta server (not practical here, see LOCAL_STACK.md) would be one more
file registered the same way, on ``letta-client``: a user -> an agent, ``write``
-> ``agents.passages.create``, ``search`` -> ``agents.passages.search``. Not built.
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.embedder import EMBEDDING_DIMS, TextEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.consolidation import (
    SUMMARY_PROMPT_VERSION,
    summarize_deterministic,
    summarize_with_model,
)
from dmt_proxy.memory.backends.letta_schema import SCHEMA, SCHEMA_VERSION, vector_blob
from dmt_proxy.memory.backends.runner import StoreRunner
from dmt_proxy.memory.backends.vectors import VectorMatrix
from dmt_proxy.memory.base import (
    AuditState,
    MemoryRecord,
    RecordConflict,
    Scope,
    SearchHit,
    StoreErasure,
    check_write,
    combine_audit,
    nothing_to_search,
    with_audit,
)
from dmt_proxy.memory.registry import BackendConfig, BackendPlugin, register_backend
from dmt_proxy.memory.write.storage import compact_sqlite
from dmt_proxy.provenance import AuditStamp
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint

_SUMMARY_NS = uuid.UUID("6b1f3c1e-0d7a-4c55-9a51-2f0d6c1f7a10")


@dataclass
class PagingStats:
    """What the pager did since open."""

    page_outs: int = 0
    evicted: int = 0
    model_summaries: int = 0
    deterministic_summaries: int = 0
    model_failures: int = 0


Archive = tuple[VectorMatrix, dict[str, tuple[str | None, str | None, str]]]
"""A user's archival vectors and, per id, (agent, session, audit status)."""


def _core_key(scope: Scope) -> str:
    return Scope(user=scope.user, agent=scope.agent).key


def _state_json(record: MemoryRecord) -> str:
    return AuditState(status=record.audit_status, tag=record.tag).model_dump_json()


@register_backend("letta")
class LettaPagingBackend(BackendPlugin):
    """Bounded core context + archival store + recursive summary (see module docstring)."""

    name: ClassVar[str]

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        core_size: int = Field(default=10, ge=1, le=1000)
        page_size: int = Field(default=5, ge=1, le=1000)
        core_hits: int = Field(default=2, ge=0, le=100)
        min_score: float = Field(default=0.1, ge=-1.0, le=1.0)
        summarizer: Literal["auto", "model", "deterministic"] = "auto"
        summary_max_words: int = Field(default=150, ge=10, le=2000)
        summary_max_chars: int = Field(default=2000, ge=100, le=50_000)

    def __init__(
        self,
        conn: sqlite3.Connection,
        embedder: TextEmbedder,
        options: Options,
        chat: ChatModel | None,
        llm: ModelEndpoint | None,
    ) -> None:
        self._conn = conn
        self._embedder = embedder
        self._options = options
        self._chat = chat if options.summarizer != "deterministic" else None
        self._llm = llm
        self._runner = StoreRunner("letta", (sqlite3.Error,))
        self._summary_lock = asyncio.Lock()
        self._archives: dict[str, Archive] = {}
        self._seq = int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM records").fetchone()[0])
        self.stats = PagingStats()

    @classmethod
    async def open(
        cls, config: BackendConfig, options: LettaPagingBackend.Options
    ) -> LettaPagingBackend:
        """Open ``<state_dir>/memory/letta/paging.sqlite``."""
        if options.summarizer == "model" and (config.chat is None or config.llm is None):
            raise ConfigError(
                "letta summarizer 'model' needs a chat model (config.chat and config.llm)"
            )
        path = config.store_dir("letta") / "paging.sqlite"
        try:
            conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise ConfigError(f"letta store {path} cannot be opened: {exc}") from exc
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA secure_delete=ON")  # freed space is zeroed (erasure)
            conn.executescript(SCHEMA)
            conn.execute(
                "INSERT OR IGNORE INTO meta (k, v) VALUES ('schema', ?)", (str(SCHEMA_VERSION),)
            )
        except sqlite3.Error as exc:
            conn.close()
            raise ConfigError(f"letta store {path} cannot be opened: {exc}") from exc
        return cls(conn, config.shared_embedder(), options, config.chat, config.llm)

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self._embedder.embed, texts)

    # -- archival index ---------------------------------------------------------

    def _archive(self, user_key: str) -> Archive:
        cached = self._archives.get(user_key)
        if cached is None:
            matrix, meta = VectorMatrix(EMBEDDING_DIMS), {}
            rows = self._conn.execute(
                "SELECT id, agent, session, audit_status, embedding FROM records"
                " WHERE user_key = ? AND tier = 'archival'",
                (user_key,),
            )
            for rid, agent, session, status, blob in rows:
                matrix.set(rid, np.frombuffer(blob, dtype=np.float32))
                meta[rid] = (agent, session, status)
            cached = self._archives[user_key] = (matrix, meta)
        return cached

    def _archive_drop(self, user_key: str, rid: str) -> None:
        cached = self._archives.get(user_key)
        if cached is not None:
            cached[0].remove(rid)
            cached[1].pop(rid, None)

    # -- protocol -----------------------------------------------------------------

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        if nothing_to_search(query, k):
            return []
        qv = np.asarray((await self._embed([query]))[0], dtype=np.float32)

        def allowed(agent: str | None, session: str | None, status: str) -> bool:
            if not include_quarantined and status == AuditStatus.QUARANTINED.value:
                return False
            return (scope.agent is None or scope.agent == agent) and (
                scope.session is None or scope.session == session
            )

        def run() -> list[SearchHit]:
            core = []
            rows = self._conn.execute(
                "SELECT body, embedding, agent, session, audit_status FROM records"
                " WHERE user_key = ? AND user = ? AND tier = 'core'",
                (scope.user_key, scope.user),
            )
            for body, blob, agent, session, status in rows:
                if allowed(agent, session, status):
                    score = float(np.frombuffer(blob, dtype=np.float32) @ qv)
                    core.append(
                        SearchHit(record=MemoryRecord.model_validate_json(body), score=score)
                    )
            core.sort(key=lambda h: -h.score)
            hits = core[: min(k, self._options.core_hits)]
            matrix, meta = self._archive(scope.user_key)
            if len(hits) < k and len(matrix):
                scores = matrix.scores(qv)
                chosen: list[tuple[str, float]] = []
                for row in np.argsort(-scores, kind="stable"):
                    if scores[row] < self._options.min_score or len(hits) + len(chosen) >= k:
                        break
                    rid = matrix.keys[row]
                    if allowed(*meta[rid]):
                        chosen.append((rid, float(scores[row])))
                marks = ",".join("?" * len(chosen))
                sql = f"SELECT id, body FROM records WHERE id IN ({marks})"
                bodies = dict(self._conn.execute(sql, [rid for rid, _ in chosen]).fetchall())
                for rid, score in chosen:
                    record = MemoryRecord.model_validate_json(bodies[rid])
                    if record.scope.user == scope.user:
                        hits.append(SearchHit(record=record, score=score))
            # A small or sparse archive leaves room: fill it with the rest of the core.
            rest = core[min(k, self._options.core_hits) :]
            return hits + rest[: max(0, k - len(hits))]

        return await self._runner.run(run)

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        check_write(scope, record)
        vector = vector_blob((await self._embed([record.text]))[0])

        def run() -> tuple[MemoryRecord, bool]:
            row = self._conn.execute(
                "SELECT user, body, tier FROM records WHERE id = ?", (record.id,)
            ).fetchone()
            stored = record
            if row is not None:
                if row[0] != scope.user:
                    raise RecordConflict(f"record {record.id} belongs to another user")
                old = MemoryRecord.model_validate_json(row[1])
                stored = record.model_copy(update={"created_at": old.created_at})
                self._conn.execute(
                    "UPDATE records SET core_key = ?, agent = ?, session = ?, audit_status = ?,"
                    " body = ?, embedding = ? WHERE id = ?",
                    (
                        _core_key(scope),
                        scope.agent,
                        scope.session,
                        stored.audit_status.value,
                        stored.model_dump_json(),
                        vector,
                        record.id,
                    ),
                )
                self._archives.pop(scope.user_key, None)  # rare: rebuild on next search
                return stored, False
            self._seq += 1
            self._conn.execute(
                "INSERT INTO records (id, user_key, core_key, user, agent, session, tier, kind, seq,"
                " audit_status, body, embedding) VALUES (?, ?, ?, ?, ?, ?, 'core', 'interaction',"
                " ?, ?, ?, ?)",
                (
                    record.id,
                    scope.user_key,
                    _core_key(scope),
                    scope.user,
                    scope.agent,
                    scope.session,
                    self._seq,
                    record.audit_status.value,
                    record.model_dump_json(),
                    vector,
                ),
            )
            return stored, self._page_out(scope)

        stored, paged = await self._runner.run(run)
        if paged:
            await self._summarize(scope)
        return stored

    def _page_out(self, scope: Scope) -> bool:
        """Move the oldest core interactions to archival when the core overflows."""
        core_key = _core_key(scope)
        count = self._conn.execute(
            "SELECT COUNT(*) FROM records WHERE core_key = ? AND tier = 'core' AND kind = 'interaction'",
            (core_key,),
        ).fetchone()[0]
        if count <= self._options.core_size:
            return False
        evict = max(self._options.page_size, count - self._options.core_size)
        rows = self._conn.execute(
            "SELECT id, agent, session, audit_status, embedding FROM records WHERE core_key = ?"
            " AND tier = 'core' AND kind = 'interaction' ORDER BY seq LIMIT ?",
            (core_key, min(evict, count)),
        ).fetchall()
        self._conn.execute("BEGIN")
        self._conn.executemany(
            "UPDATE records SET tier = 'archival', summarized = 0 WHERE id = ?",
            [(r[0],) for r in rows],
        )
        self._conn.execute("COMMIT")
        cached = self._archives.get(scope.user_key)
        if cached is not None:
            for rid, agent, session, status, blob in rows:
                cached[0].set(rid, np.frombuffer(blob, dtype=np.float32))
                cached[1][rid] = (agent, session, status)
        self.stats.page_outs += 1
        self.stats.evicted += len(rows)
        return True

    async def _summarize(self, scope: Scope) -> None:
        core_key = _core_key(scope)
        owner = Scope(user=scope.user, agent=scope.agent)
        summary_id = str(uuid.uuid5(_SUMMARY_NS, core_key))
        async with self._summary_lock:

            def pending() -> tuple[list[MemoryRecord], MemoryRecord | None]:
                rows = self._conn.execute(
                    "SELECT body FROM records WHERE core_key = ? AND tier = 'archival'"
                    " AND summarized = 0 ORDER BY seq",
                    (core_key,),
                ).fetchall()
                prev = self._conn.execute(
                    "SELECT body FROM records WHERE id = ?", (summary_id,)
                ).fetchone()
                return (
                    [MemoryRecord.model_validate_json(r[0]) for r in rows],
                    MemoryRecord.model_validate_json(prev[0]) if prev else None,
                )

            evicted, previous = await self._runner.run(pending)
            if not evicted:
                return
            prev_text = previous.text if previous else ""
            texts = [r.text for r in evicted]
            method = "deterministic_v1"
            text = ""
            if self._chat is not None and self._llm is not None:
                try:
                    text = await summarize_with_model(
                        self._chat,
                        self._llm,
                        prev_text,
                        texts,
                        max_words=self._options.summary_max_words,
                    )
                    method = SUMMARY_PROMPT_VERSION
                    self.stats.model_summaries += 1
                except Exception:
                    # The pager must keep working when the model is down or answers
                    # badly: fall back to the deterministic summary and count it.
                    self.stats.model_failures += 1
            if method == "deterministic_v1":
                text = summarize_deterministic(
                    prev_text, texts, max_chars=self._options.summary_max_chars
                )
                self.stats.deterministic_summaries += 1
            vector = vector_blob((await self._embed([text]))[0])

            def store() -> None:
                self._conn.execute("BEGIN")
                self._conn.executemany(
                    "INSERT OR REPLACE INTO summary_sources (summary_id, source_id, state) VALUES (?, ?, ?)",
                    [(summary_id, r.id, _state_json(r)) for r in evicted],
                )
                combined = self._combined(summary_id)
                record = MemoryRecord(
                    id=summary_id,
                    scope=owner,
                    text=text,
                    created_at=previous.created_at if previous else evicted[0].created_at,
                    updated_at=datetime.now(UTC),
                    audit_status=combined.status,
                    tag=combined.tag,
                    metadata={
                        "kind": "summary",
                        "summarizer": method,
                        "summarized": (previous.metadata.get("summarized", 0) if previous else 0)
                        + len(evicted),
                    },
                )
                self._conn.execute(
                    "INSERT OR REPLACE INTO records (id, user_key, core_key, user, agent, session, tier,"
                    " kind, seq, audit_status, body, embedding) VALUES (?, ?, ?, ?, ?, NULL, 'core',"
                    " 'summary', 0, ?, ?, ?)",
                    (
                        summary_id,
                        scope.user_key,
                        core_key,
                        scope.user,
                        scope.agent,
                        record.audit_status.value,
                        record.model_dump_json(),
                        vector,
                    ),
                )
                self._conn.executemany(
                    "UPDATE records SET summarized = 1 WHERE id = ?", [(r.id,) for r in evicted]
                )
                self._conn.execute("COMMIT")

            await self._runner.run(store)

    def _combined(self, summary_id: str) -> AuditState:
        rows = self._conn.execute(
            "SELECT state FROM summary_sources WHERE summary_id = ?", (summary_id,)
        )
        return combine_audit(AuditState.model_validate_json(r[0]) for r in rows)

    def summary(self, scope: Scope) -> str | None:
        """The running summary text of ``scope``'s (user, agent) core, if any (sync, for tests)."""
        summary_id = str(uuid.uuid5(_SUMMARY_NS, _core_key(scope)))
        record = self._runner.call(lambda: self._stored(summary_id))
        return record.text if record else None

    async def update(
        self,
        scope: Scope,
        id: str,
        *,
        audit_status: AuditStatus,
        tag: BiasTag | None,
        audited: AuditStamp | None = None,
    ) -> MemoryRecord | None:
        state = AuditState(status=audit_status, tag=tag)

        def run() -> MemoryRecord | None:
            row = self._conn.execute(
                "SELECT body, kind, user_key, agent, session FROM records WHERE id = ?", (id,)
            ).fetchone()
            if row is None:
                return None
            record = MemoryRecord.model_validate_json(row[0])
            if not scope.sees(record.scope):
                return None
            self._conn.execute("BEGIN")
            if row[1] == "summary":
                # The summary's own verdict counts alongside its sources' states.
                self._conn.execute(
                    "INSERT OR REPLACE INTO summary_sources (summary_id, source_id, state) VALUES (?, ?, ?)",
                    (id, id, state.model_dump_json()),
                )
                combined = self._combined(id)
                new = with_audit(record, combined.status, combined.tag, audited)
            else:
                new = with_audit(record, audit_status, tag, audited)
            self._set_body(new)
            if row[1] == "interaction":
                affected = [
                    r[0]
                    for r in self._conn.execute(
                        "SELECT summary_id FROM summary_sources WHERE source_id = ?", (id,)
                    )
                ]
                self._conn.execute(
                    "UPDATE summary_sources SET state = ? WHERE source_id = ?",
                    (state.model_dump_json(), id),
                )
                for summary_id in affected:
                    srow = self._conn.execute(
                        "SELECT body FROM records WHERE id = ?", (summary_id,)
                    ).fetchone()
                    if srow is not None:
                        combined = self._combined(summary_id)
                        self._set_body(
                            with_audit(
                                MemoryRecord.model_validate_json(srow[0]),
                                combined.status,
                                combined.tag,
                            )
                        )
            self._conn.execute("COMMIT")
            cached = self._archives.get(row[2])
            if cached is not None and id in cached[1]:
                cached[1][id] = (row[3], row[4], new.audit_status.value)
            return new

        return await self._runner.run(run)

    def _set_body(self, record: MemoryRecord) -> None:
        self._conn.execute(
            "UPDATE records SET audit_status = ?, body = ? WHERE id = ?",
            (record.audit_status.value, record.model_dump_json(), record.id),
        )

    def _stored(self, id: str) -> MemoryRecord | None:
        row = self._conn.execute("SELECT body FROM records WHERE id = ?", (id,)).fetchone()
        return MemoryRecord.model_validate_json(row[0]) if row else None

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        def run() -> MemoryRecord | None:
            record = self._stored(id)
            return record if record is not None and scope.sees(record.scope) else None

        return await self._runner.run(run)

    async def scope_of(self, id: str) -> Scope | None:
        def run() -> Scope | None:
            record = self._stored(id)
            return None if record is None else record.scope

        return await self._runner.run(run)

    def _visible_rows(self, scope: Scope) -> list[tuple[str, str, str]]:
        sql = "SELECT id, body, kind FROM records WHERE user_key = ? AND user = ?"
        args: list[Any] = [scope.user_key, scope.user]
        for column, value in (("agent", scope.agent), ("session", scope.session)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        return list(self._conn.execute(sql, args))

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        def run() -> list[MemoryRecord]:
            records = sorted(
                (
                    MemoryRecord.model_validate_json(body)
                    for _, body, _ in self._visible_rows(scope)
                ),
                key=lambda r: r.created_at,
            )
            return records if limit is None else records[:limit]

        return await self._runner.run(run)

    def _delete_ids(self, user_key: str, ids: Sequence[tuple[str, str]]) -> None:
        self._conn.execute("BEGIN")
        for rid, kind in ids:
            self._conn.execute("DELETE FROM records WHERE id = ?", (rid,))
            if kind == "summary":
                self._conn.execute("DELETE FROM summary_sources WHERE summary_id = ?", (rid,))
            self._archive_drop(user_key, rid)
        self._conn.execute("COMMIT")

    async def delete(self, scope: Scope, id: str) -> bool:
        def run() -> bool:
            row = self._conn.execute(
                "SELECT body, kind FROM records WHERE id = ?", (id,)
            ).fetchone()
            if row is None or not scope.sees(MemoryRecord.model_validate_json(row[0]).scope):
                return False
            self._delete_ids(scope.user_key, [(id, row[1])])
            return True

        return await self._runner.run(run)

    async def delete_all(self, scope: Scope) -> int:
        def run() -> int:
            rows = self._visible_rows(scope)
            self._delete_ids(scope.user_key, [(rid, kind) for rid, _, kind in rows])
            return len(rows)

        return await self._runner.run(run)

    async def erase(self, user: str, *, full: bool = False) -> StoreErasure:
        """Delete every row of ``user`` and compact the file."""
        deleted = await self.delete_all(Scope(user=user))

        def compact() -> str:
            path = str(self._conn.execute("PRAGMA database_list").fetchone()[2])
            compact_sqlite(self._conn, path)
            return path

        return StoreErasure(deleted=deleted, compacted=[await self._runner.run(compact)])

    async def close(self) -> None:
        await self._runner.close(self._conn.close)
