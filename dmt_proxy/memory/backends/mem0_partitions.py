"""A mem0 vector store that keeps one Qdrant collection per user (see mem0_backend).

It implements mem0's ``VectorStoreBase`` by routing every call to mem0's own
``Qdrant`` provider for the user's collection, all sharing one local client.
Routing keys: ``filters["user_id"]`` for searches and listings, the payload's
``user_id`` for inserts, and an in-memory map point id -> user for get, update
and delete (rebuilt from the collections at start-up). It also keeps the map
record id (``dmt_id``) -> point ids, so idempotent writes need no scan, and
which users hold quarantined points. ``SharedEmbedding`` hands mem0 the process's
shared embedder instead of a second copy of the model.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from mem0.embeddings.base import EmbeddingBase
from mem0.vector_stores.base import VectorStoreBase
from mem0.vector_stores.qdrant import Qdrant
from qdrant_client.models import Distance

from dmt_proxy.embedder import EMBEDDING_DIMS, TextEmbedder

_PART = "__u_"
_QUARANTINED = "quarantined"


class _LocalPartition(Qdrant):  # type: ignore[misc]
    """mem0's Qdrant provider on a shared local client."""

    def create_col(
        self, vector_size: int, on_disk: bool, distance: Distance = Distance.DOT
    ) -> None:
        # all-MiniLM-L6-v2 ends in a Normalize layer, so dot product = cosine. With COSINE,
        # Qdrant's local mode re-normalizes every stored vector on every search (~20 ms of
        # CPU at 10k points here); DOT skips that. Existing collections keep their metric.
        super().create_col(vector_size, on_disk, distance)

    def _create_filter_indexes(self) -> None:
        # Local mode has no payload indexes (mem0 skips them in path mode too); without
        # this, every open would rewrite Qdrant's meta file four times per collection.
        return None


class UserPartitions(VectorStoreBase):  # type: ignore[misc]
    """Routes mem0 vector-store calls to one collection per ``user_id``."""

    def __init__(self, client: Any, prefix: str, dims: int) -> None:
        self.client = client
        self.collection_name = prefix
        self.embedding_model_dims = dims
        self._parts: dict[str, _LocalPartition] = {}
        self._owner: dict[str, str] = {}  # point id -> user key
        self._record: dict[str, str] = {}  # point id -> dmt record id
        self._points: dict[str, set[str]] = defaultdict(set)  # dmt record id -> point ids
        self._quarantined: dict[str, set[str]] = defaultdict(set)  # user key -> point ids
        self._sizes: dict[str, int] = defaultdict(int)
        self.search_cap: int | None = None
        """Upper bound on semantic candidates per search, set by the backend (see there)."""
        for collection in client.get_collections().collections:
            if collection.name.startswith(prefix + _PART):
                self._load(collection.name[len(prefix + _PART) :])

    # -- bookkeeping --------------------------------------------------------------

    def _name(self, user_key: str) -> str:
        return f"{self.collection_name}{_PART}{user_key}"

    def partition_name(self, user_key: str) -> str:
        """The name of the user's collection (a directory under Qdrant's ``collection/``)."""
        return self._name(user_key)

    def _partition(self, user_key: str, *, create: bool) -> _LocalPartition | None:
        part = self._parts.get(user_key)
        if part is None and create:
            part = _LocalPartition(
                collection_name=self._name(user_key),
                embedding_model_dims=self.embedding_model_dims,
                client=self.client,
                on_disk=True,
            )
            part.is_local = True
            self._parts[user_key] = part
        return part

    def _load(self, user_key: str) -> None:
        self._partition(user_key, create=True)
        offset = None
        while True:
            points, offset = self.client.scroll(
                collection_name=self._name(user_key),
                limit=1000,
                offset=offset,
                with_payload=["dmt_id", "audit_status"],
                with_vectors=False,
            )
            for point in points:
                self._track(str(point.id), user_key, point.payload or {})
            if offset is None:
                break

    def _track(self, point_id: str, user_key: str, payload: dict[str, Any]) -> None:
        if point_id not in self._owner:
            self._sizes[user_key] += 1
        self._owner[point_id] = user_key
        record_id = payload.get("dmt_id")
        if isinstance(record_id, str):
            self._record[point_id] = record_id
            self._points[record_id].add(point_id)
        if payload.get("audit_status") == _QUARANTINED:
            self._quarantined[user_key].add(point_id)
        else:
            self._quarantined[user_key].discard(point_id)

    def _untrack(self, point_id: str) -> None:
        user_key = self._owner.pop(point_id, None)
        if user_key is None:
            return
        self._sizes[user_key] -= 1
        self._quarantined[user_key].discard(point_id)
        record_id = self._record.pop(point_id, None)
        if record_id is not None:
            self._points[record_id].discard(point_id)
            if not self._points[record_id]:
                del self._points[record_id]

    def points_of(self, record_id: str) -> set[str]:
        """mem0 point ids holding record ``record_id`` (more than one with infer=True)."""
        return set(self._points.get(record_id, ()))

    def user_of(self, point_id: str) -> str | None:
        return self._owner.get(point_id)

    def has_quarantined(self, user_key: str) -> bool:
        return bool(self._quarantined.get(user_key))

    def size(self, user_key: str) -> int:
        """Number of points in the user's partition."""
        return self._sizes.get(user_key, 0)

    def points_of_user(self, user_key: str) -> list[str]:
        """Every point id in the user's partition."""
        return sorted(p for p, owner in self._owner.items() if owner == user_key)

    def live_points(self) -> set[str]:
        """Every point id in every partition."""
        return set(self._owner)

    def drop(self, user_key: str) -> list[str]:
        """Delete the user's whole partition: Qdrant removes the collection's directory
        (its SQLite file with every point's text in it). The point ids it held."""
        points = self.points_of_user(user_key)
        if self._parts.pop(user_key, None) is not None or self.client.collection_exists(
            self._name(user_key)
        ):
            self.client.delete_collection(collection_name=self._name(user_key))
        for point_id in points:
            self._untrack(point_id)
        self._quarantined.pop(user_key, None)
        self._sizes.pop(user_key, None)
        return points

    def close(self) -> None:
        """Close the shared local client, releasing Qdrant's lock on the path."""
        self.client.close()

    @staticmethod
    def _split(filters: dict[str, Any] | None) -> tuple[str, dict[str, Any] | None]:
        if not filters or not isinstance(filters.get("user_id"), str):
            raise ValueError("every memory query must name a user_id (explicit scope)")
        rest = {k: v for k, v in filters.items() if k != "user_id"}
        return filters["user_id"], rest or None

    # -- mem0 VectorStoreBase -----------------------------------------------------

    def create_col(
        self, name: str | None = None, vector_size: int | None = None, distance: Any = None
    ) -> None:
        return None  # partitions are created on first insert

    def insert(
        self,
        vectors: list[Any],
        payloads: list[dict[str, Any]] | None = None,
        ids: list[str] | None = None,
    ) -> None:
        if payloads is None or ids is None:
            raise ValueError("partitioned inserts need payloads (user_id) and ids")
        groups: dict[str, list[int]] = defaultdict(list)
        for i, payload in enumerate(payloads):
            user_key = payload.get("user_id")
            if not isinstance(user_key, str):
                raise ValueError("every memory must carry a user_id (explicit scope)")
            groups[user_key].append(i)
        for user_key, rows in groups.items():
            part = self._partition(user_key, create=True)
            assert part is not None
            part.insert(
                vectors=[vectors[i] for i in rows],
                payloads=[payloads[i] for i in rows],
                ids=[ids[i] for i in rows],
            )
            for i in rows:
                self._track(str(ids[i]), user_key, payloads[i])

    def search(
        self,
        query: str,
        vectors: list[float],
        top_k: int = 5,
        filters: dict[str, Any] | None = None,
    ) -> list[Any]:
        user_key, rest = self._split(filters)
        part = self._partition(user_key, create=False)
        if part is None:
            return []
        if self.search_cap is not None:
            top_k = min(top_k, self.search_cap)
        hits = part.search(query=query, vectors=vectors, top_k=top_k, filters=rest)
        # The partition already isolates users; re-check each hit all the same.
        return [h for h in hits if (h.payload or {}).get("user_id") == user_key]

    def search_batch(
        self,
        queries: list[str],
        vectors_list: list[Any],
        top_k: int = 1,
        filters: dict[str, Any] | None = None,
    ) -> list[list[Any]]:
        return [
            self.search(q, v, top_k=top_k, filters=filters)
            for q, v in zip(queries, vectors_list, strict=True)
        ]

    def keyword_search(
        self, query: str, top_k: int = 5, filters: dict[str, Any] | None = None
    ) -> list[Any] | None:
        user_key, rest = self._split(filters)
        part = self._partition(user_key, create=False)
        if part is None:
            return None
        hits = part.keyword_search(query=query, top_k=top_k, filters=rest)
        if hits is None:
            return None
        return [h for h in hits if (h.payload or {}).get("user_id") == user_key]

    def delete(self, vector_id: str) -> None:
        user_key = self._owner.get(str(vector_id))
        part = self._partition(user_key, create=False) if user_key else None
        if part is not None:
            part.delete(vector_id=vector_id)
        self._untrack(str(vector_id))

    def update(
        self,
        vector_id: str,
        vector: list[float] | None = None,
        payload: dict[str, Any] | None = None,
    ) -> None:
        user_key = self._owner.get(str(vector_id))
        part = self._partition(user_key, create=False) if user_key else None
        if part is None or user_key is None:
            raise ValueError(f"memory point {vector_id} not found")
        part.update(vector_id=vector_id, vector=vector, payload=payload)
        if payload is not None:
            self._track(str(vector_id), user_key, payload)

    def get(self, vector_id: str) -> Any:
        user_key = self._owner.get(str(vector_id))
        part = self._partition(user_key, create=False) if user_key else None
        return None if part is None else part.get(vector_id=vector_id)

    def list_cols(self) -> Any:
        return self.client.get_collections()

    def delete_col(self) -> None:
        for user_key in list(self._parts):
            self.client.delete_collection(collection_name=self._name(user_key))
        self._parts.clear()
        for store in (self._owner, self._record, self._points, self._quarantined, self._sizes):
            store.clear()

    def col_info(self) -> dict[str, Any]:
        return {"partitions": len(self._parts), "points": len(self._owner)}

    def list(self, filters: dict[str, Any] | None = None, top_k: int = 100) -> Any:
        user_key, rest = self._split(filters)
        part = self._partition(user_key, create=False)
        if part is None:
            return ([], None)
        points, offset = part.list(filters=rest, top_k=top_k)
        return ([p for p in points if (p.payload or {}).get("user_id") == user_key], offset)

    def reset(self) -> None:
        self.delete_col()


class SharedEmbedding(EmbeddingBase):  # type: ignore[misc]
    """mem0's embedder interface over the process's shared embedder (one model in RAM)."""

    def __init__(self, embedder: TextEmbedder) -> None:
        super().__init__(None)
        self.config.embedding_dims = EMBEDDING_DIMS
        self._embedder = embedder

    def embed(self, text: str, memory_action: str | None = None) -> list[float]:
        """The unit-length embedding of one text (the action makes no difference here)."""
        return self._embedder.embed([text])[0]

    def embed_batch(self, texts: list[str], memory_action: str = "add") -> list[list[float]]:
        """One batched call for many texts."""
        return self._embedder.embed(list(texts))
