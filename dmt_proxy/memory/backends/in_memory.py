"""``memory``: a small in-process backend shipped as the fast fake for tests and demos.

It is a real implementation of the protocol, not a mock. Scoring is naive and
embedding-free by default (``scoring="keyword"``: cosine over sets of lightly
stemmed, stop-word-filtered word tokens); ``scoring="embedding"`` uses the shared
local embedder instead. Persistence is a JSON snapshot written on ``close()``
(and read on open): a crash loses everything since the last clean close, which is
why it is not a production store. ``erase(user)`` writes the snapshot again at once, so
the erased user's records leave the file then, not at the next close.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from dmt_proxy.embedder import TextEmbedder
from dmt_proxy.memory.backends.runner import StoreRunner
from dmt_proxy.memory.base import (
    MemoryRecord,
    RecordConflict,
    Scope,
    SearchHit,
    StoreErasure,
    check_k,
    check_write,
    with_audit,
)
from dmt_proxy.memory.registry import (
    BackendConfig,
    BackendPlugin,
    ContractEnv,
    register_backend,
)
from dmt_proxy.provenance import AuditStamp
from dmt_proxy.tags import AuditStatus, BiasTag

SNAPSHOT_VERSION = 1

_STOP = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "do",
        "does",
        "for",
        "from",
        "has",
        "have",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "our",
        "so",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "user",
        "assistant",
    ]
)


def keyword_tokens(text: str) -> set[str]:
    """Lower-cased word tokens without stop words, with a crude suffix stemmer."""
    tokens = set()
    for word in re.findall(r"[a-z0-9]+", text.lower()):
        if word in _STOP:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        tokens.add(word)
    return tokens


INLINE_TOKENS_CHARS = 10_000
"""Texts up to this long are tokenised on the event loop (under a millisecond); a longer
query or record (up to 4 MiB and 100,000 characters) in a worker thread."""


async def _tokens_of(text: str) -> set[str]:
    if len(text) <= INLINE_TOKENS_CHARS:
        return keyword_tokens(text)
    return await asyncio.to_thread(keyword_tokens, text)


def keyword_score(query: set[str], doc: set[str]) -> float:
    """Set cosine |q ∩ d| / sqrt(|q| |d|); 0.0 when either set is empty."""
    if not query or not doc:
        return 0.0
    return len(query & doc) / math.sqrt(len(query) * len(doc))


@register_backend("memory")
class InMemoryBackend(BackendPlugin):
    """Dict-backed backend; see the module docstring for its limits."""

    name: ClassVar[str]

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        scoring: Literal["keyword", "embedding"] = "keyword"
        persist: bool = True
        """Write a JSON snapshot under the state dir on close and read it on open."""

    def __init__(
        self,
        *,
        snapshot: Path | None = None,
        embedder: TextEmbedder | None = None,
    ) -> None:
        self._records: dict[str, MemoryRecord] = {}
        self._tokens: dict[str, set[str]] = {}
        self._vectors: dict[str, list[float]] = {}
        self._snapshot = snapshot
        self._embedder = embedder
        # Serialises writes across their embedding await; the runner only tracks closing.
        self._lock = asyncio.Lock()
        self._runner = StoreRunner("memory")
        if snapshot is not None and snapshot.is_file():
            raw = json.loads(snapshot.read_text(encoding="utf-8"))
            for item in raw.get("records", []):
                record = MemoryRecord.model_validate(item)
                self._index(record, raw.get("vectors", {}).get(record.id))

    @classmethod
    def contract_config(cls, env: ContractEnv) -> BackendConfig:
        """The contract runs this fake with its keyword scoring."""
        return BackendConfig(state_dir=env.state_dir, embedder=env.embedder,
                             options={"scoring": "keyword"})  # fmt: skip

    @classmethod
    async def open(cls, config: BackendConfig, options: InMemoryBackend.Options) -> InMemoryBackend:
        """Open from ``<state_dir>/memory/memory/snapshot.json`` (if persisting)."""
        snapshot = config.store_dir("memory") / "snapshot.json" if options.persist else None
        embedder = config.shared_embedder() if options.scoring == "embedding" else None
        return cls(snapshot=snapshot, embedder=embedder)

    def _index(
        self, record: MemoryRecord, vector: list[float] | None, tokens: set[str] | None = None
    ) -> None:
        self._records[record.id] = record
        self._tokens[record.id] = keyword_tokens(record.text) if tokens is None else tokens
        if vector is not None:
            self._vectors[record.id] = vector

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        check_k(k)
        self._runner.check_open()
        visible = [
            r
            for r in self._records.values()
            if scope.sees(r.scope) and (include_quarantined or not r.quarantined)
        ]
        if not visible or k == 0:
            return []
        if self._embedder is not None:
            missing = [r for r in visible if r.id not in self._vectors]
            if missing:  # a snapshot written in keyword mode carries no vectors
                vectors = await asyncio.to_thread(self._embedder.embed, [r.text for r in missing])
                self._vectors.update({r.id: v for r, v in zip(missing, vectors, strict=True)})
            qv = (await asyncio.to_thread(self._embedder.embed, [query]))[0]
            scored = [
                (sum(a * b for a, b in zip(qv, self._vectors[r.id], strict=True)), r)
                for r in visible
            ]
        else:
            qt = await _tokens_of(query)
            scored = [(keyword_score(qt, self._tokens[r.id]), r) for r in visible]
            scored = [(s, r) for s, r in scored if s > 0.0]
        scored.sort(key=lambda pair: (-pair[0], pair[1].created_at))
        return [SearchHit(record=r, score=float(s)) for s, r in scored[:k]]

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        check_write(scope, record)
        self._runner.check_open()
        async with self._lock:
            old = self._records.get(record.id)
            if old is not None and old.scope.user != scope.user:
                raise RecordConflict(f"record {record.id} belongs to another user")
            vector = None
            if self._embedder is not None:
                vector = (await asyncio.to_thread(self._embedder.embed, [record.text]))[0]
            if old is not None:
                record = record.model_copy(update={"created_at": old.created_at})
            self._index(record, vector, await _tokens_of(record.text))
            return record

    async def update(
        self,
        scope: Scope,
        id: str,
        *,
        audit_status: AuditStatus,
        tag: BiasTag | None,
        audited: AuditStamp | None = None,
    ) -> MemoryRecord | None:
        old = await self.get(scope, id)
        if old is None:
            return None
        new = with_audit(old, audit_status, tag, audited)
        self._records[id] = new
        return new

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        self._runner.check_open()
        record = self._records.get(id)
        return record if record is not None and scope.sees(record.scope) else None

    async def scope_of(self, id: str) -> Scope | None:
        self._runner.check_open()
        record = self._records.get(id)
        return None if record is None else record.scope

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        self._runner.check_open()
        out = sorted(
            (r for r in self._records.values() if scope.sees(r.scope)),
            key=lambda r: r.created_at,
        )
        return out if limit is None else out[:limit]

    async def delete(self, scope: Scope, id: str) -> bool:
        if await self.get(scope, id) is None:
            return False
        self._forget(id)
        return True

    def _forget(self, id: str) -> None:
        self._tokens.pop(id, None)
        self._vectors.pop(id, None)
        self._records.pop(id, None)

    async def delete_all(self, scope: Scope) -> int:
        self._runner.check_open()
        ids = [rid for rid, r in self._records.items() if scope.sees(r.scope)]
        for rid in ids:
            self._forget(rid)
        return len(ids)

    async def erase(self, user: str, *, full: bool = False) -> StoreErasure:
        """Delete ``user``'s records and rewrite the snapshot without them (a new file
        replaces the old one)."""
        deleted = await self.delete_all(Scope(user=user))
        if self._snapshot is None or not self._snapshot.exists():
            return StoreErasure(deleted=deleted)
        self._save()  # in the event loop, as close() does: no call runs meanwhile
        return StoreErasure(deleted=deleted, compacted=[str(self._snapshot)])

    async def close(self) -> None:
        # In the event loop, not a thread: the snapshot must not race a running call.
        self._runner.shut(self._save)

    def _save(self) -> None:
        if self._snapshot is None:
            return
        payload = {
            "version": SNAPSHOT_VERSION,
            "records": [r.model_dump(mode="json") for r in self._records.values()],
            "vectors": self._vectors,
        }
        tmp = self._snapshot.with_suffix(".tmp")
        tmp.write_text(json.dumps(payload), encoding="utf-8")
        os.replace(tmp, self._snapshot)
