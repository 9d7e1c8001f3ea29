"""A persistent langgraph ``BaseStore`` with vector search that works on this Python.

langgraph's own ``SqliteStore`` does vector search through the sqlite-vec
extension, which needs ``sqlite3.Connection.enable_load_extension``. The Python
builds used here (pyenv 3.11, Debian) are compiled without it, so
``SqliteStore(index=...)`` fails at ``setup()`` with an AttributeError. This
store keeps langgraph's ``SqliteStore`` (no index) for the items, so the file is
a normal langgraph store, and adds the index itself: one float32 vector per
indexed item in a side table of the same SQLite file (``dmt_vectors``), held in
RAM as a numpy matrix per namespace and scored by dot product (the embedder
returns unit vectors, so this is cosine similarity). Searches with a ``query``
are answered here; everything else goes to ``SqliteStore`` unchanged.

It is a full ``BaseStore``, so langmem's ``create_memory_store_manager`` can run
on it. Thread-safe (one ``StoreRunner``); ``abatch`` runs ``batch`` in a worker thread.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
)
from langgraph.store.base.embed import get_text_at_path
from langgraph.store.sqlite import SqliteStore

from dmt_proxy.memory.backends.runner import StoreRunner
from dmt_proxy.memory.backends.vectors import VectorMatrix
from dmt_proxy.memory.write.storage import compact_sqlite

EmbedFn = Callable[[list[str]], list[list[float]]]

_VECTOR_TABLE = """
CREATE TABLE IF NOT EXISTS dmt_vectors (
    prefix TEXT NOT NULL,
    key TEXT NOT NULL,
    embedding BLOB NOT NULL,
    text_hash TEXT NOT NULL,
    PRIMARY KEY (prefix, key)
)
"""


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _prefix(namespace: tuple[str, ...]) -> str:
    return ".".join(namespace)  # SqliteStore's own encoding (labels cannot hold ".")


def _matches(value: Any, condition: Any) -> bool:
    """langgraph filter semantics: equality, nested dicts, $eq/$ne/$gt/$gte/$lt/$lte."""
    if isinstance(condition, dict):
        if any(k.startswith("$") for k in condition):
            return all(_apply(value, op, arg) for op, arg in condition.items())
        return isinstance(value, dict) and all(
            _matches(value.get(k), v) for k, v in condition.items()
        )
    return bool(value == condition)


def _apply(value: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(value == arg)
    if op == "$ne":
        return bool(value != arg)
    if value is None:
        return False
    if op == "$gt":
        return bool(value > arg)
    if op == "$gte":
        return bool(value >= arg)
    if op == "$lt":
        return bool(value < arg)
    if op == "$lte":
        return bool(value <= arg)
    raise ValueError(f"unsupported filter operator {op}")


class IndexedSqliteStore(BaseStore):
    """langgraph ``SqliteStore`` for items plus an in-RAM numpy index persisted alongside."""

    supports_ttl = False

    def __init__(
        self, path: Path, *, embed: EmbedFn, dims: int, fields: Sequence[str] = ("text",)
    ) -> None:
        self._path = path
        self._conn = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA secure_delete=ON")  # freed space is zeroed (erasure)
            self._items = SqliteStore(self._conn)
            self._items.setup()
            self._conn.execute(_VECTOR_TABLE)
        except BaseException:
            self._conn.close()  # a store that failed to open leaves no connection behind
            raise
        self._embed = embed
        self._dims = dims
        self._fields = list(fields)
        self._runner = StoreRunner("langgraph", (sqlite3.Error,))
        self._matrices: dict[tuple[str, ...], VectorMatrix] = {}
        self._namespaces_of: dict[str, set[tuple[str, ...]]] = {}
        self._hashes: dict[tuple[tuple[str, ...], str], str] = {}
        rows = self._conn.execute("SELECT prefix, key, embedding, text_hash FROM dmt_vectors")
        for prefix, key, blob, text_hash in rows:
            vector = np.frombuffer(blob, dtype=np.float32)
            self._remember(tuple(prefix.split(".")), key, vector, text_hash)

    def _remember(
        self, namespace: tuple[str, ...], key: str, vector: np.ndarray, text_hash: str
    ) -> None:
        self._matrices.setdefault(namespace, VectorMatrix(self._dims)).set(key, vector)
        self._namespaces_of.setdefault(key, set()).add(namespace)
        self._hashes[(namespace, key)] = text_hash

    def _forget(self, namespace: tuple[str, ...], key: str) -> None:
        matrix = self._matrices.get(namespace)
        if matrix is not None:
            matrix.remove(key)
        self._hashes.pop((namespace, key), None)
        spaces = self._namespaces_of.get(key)
        if spaces is not None:
            spaces.discard(namespace)
            if not spaces:
                del self._namespaces_of[key]
        self._conn.execute(
            "DELETE FROM dmt_vectors WHERE prefix = ? AND key = ?", (_prefix(namespace), key)
        )

    def namespaces_of(self, key: str) -> list[tuple[str, ...]]:
        """Namespaces holding an indexed item with this key (a cheap global lookup)."""
        return self._runner.call(lambda: sorted(self._namespaces_of.get(key, ())))

    def _text(self, value: Mapping[str, Any], index: list[str] | None) -> str:
        texts: list[str] = []
        for path in index or self._fields:
            texts.extend(t for t in get_text_at_path(value, path) if t)
        return "\n".join(texts)

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops``: vector searches here, everything else in ``SqliteStore``."""
        ops = list(ops)
        return self._runner.call(lambda: self._batch(ops))

    def _batch(self, ops: list[Op]) -> list[Result]:
        results: list[Result] = [None] * len(ops)
        inner = [(i, op) for i, op in enumerate(ops) if not (isinstance(op, SearchOp) and op.query)]
        inner_results = self._items.batch([op for _, op in inner])
        for (i, _), result in zip(inner, inner_results, strict=True):
            results[i] = result
        self._index_puts([op for op in ops if isinstance(op, PutOp)])
        for i, op in enumerate(ops):
            if isinstance(op, SearchOp) and op.query:
                results[i] = self._vector_search(op)
        return results

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` in a worker thread."""
        ops = list(ops)
        return await self._runner.run(lambda: self._batch(ops))

    def _index_puts(self, puts: list[PutOp]) -> None:
        last: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in puts:
            last[(op.namespace, op.key)] = op  # the last put of a key wins, as in SqliteStore
        pending: list[tuple[PutOp, str]] = []
        for op in last.values():
            text = (
                ""
                if op.value is None or op.index is False
                else self._text(op.value, op.index or None)
            )
            if not text:
                self._forget(op.namespace, op.key)
            elif self._hashes.get((op.namespace, op.key)) != _hash(text):
                pending.append((op, text))  # unchanged text (an audit update) keeps its vector
        if not pending:
            return
        vectors = np.asarray(self._embed([t for _, t in pending]), dtype=np.float32)
        rows = []
        for (op, text), vector in zip(pending, vectors, strict=True):
            self._remember(op.namespace, op.key, vector, _hash(text))
            rows.append((_prefix(op.namespace), op.key, vector.tobytes(), _hash(text)))
        self._conn.executemany(
            "INSERT OR REPLACE INTO dmt_vectors (prefix, key, embedding, text_hash)"
            " VALUES (?, ?, ?, ?)",
            rows,
        )

    def _vector_search(self, op: SearchOp) -> list[SearchItem]:
        assert op.query is not None
        query = np.asarray(self._embed([op.query])[0], dtype=np.float32)
        n = len(op.namespace_prefix)
        keys: list[tuple[tuple[str, ...], str]] = []
        parts: list[np.ndarray] = []
        for namespace, matrix in self._matrices.items():
            if namespace[:n] == op.namespace_prefix and matrix.keys:
                keys.extend((namespace, k) for k in matrix.keys)
                parts.append(matrix.scores(query))
        if not parts:
            return []
        scores = np.concatenate(parts)
        order = np.argsort(-scores, kind="stable")
        wanted = op.offset + op.limit
        found: list[SearchItem] = []
        chunk = max(4 * wanted, 32)
        for start in range(0, len(order), chunk):
            rows = order[start : start + chunk]
            items = self._items.batch([GetOp(keys[r][0], keys[r][1]) for r in rows])
            for r, item in zip(rows, items, strict=True):
                if not isinstance(item, Item):
                    continue
                if op.filter and not all(
                    _matches(item.value.get(k), v) for k, v in op.filter.items()
                ):
                    continue
                found.append(
                    SearchItem(
                        namespace=item.namespace,
                        key=item.key,
                        value=item.value,
                        created_at=item.created_at,
                        updated_at=item.updated_at,
                        score=float(scores[r]),
                    )
                )
                if len(found) >= wanted:
                    return found[op.offset :]
        return found[op.offset :]

    def compact(self) -> str:
        """Remove what deleted items left in the file and its WAL (``compact_sqlite``);
        its path."""
        self._runner.call(lambda: compact_sqlite(self._conn, self._path))
        return str(self._path)

    def close(self) -> None:
        """Close the SQLite connection (once; the store is unusable afterwards)."""
        self._runner.shut(self._conn.close)
