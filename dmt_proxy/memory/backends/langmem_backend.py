"""``langmem``: LangMem's approach (an LLM manager that extracts and consolidates
memories into a langgraph store) on the real langgraph ``BaseStore`` API.

Storage: ``IndexedSqliteStore`` (langgraph's ``SqliteStore`` plus a numpy index,
see ``lg_store``) at ``<state_dir>/memory/langmem/store.sqlite``, local MiniLM
embeddings, one namespace per user: ``("dmt", "memories", <user hash>)``.

Every interaction is first stored verbatim (``kind="interaction"``) so the
backend contract holds whatever the manager does. With ``consolidate=True`` a
manager then runs on the new interaction and creates or updates *consolidated*
memories (``kind="consolidated"``) in the same namespace. Two managers:

* ``json``: one structured-output call (``consolidation.plan_consolidation``,
  prompt ``consolidate_v1``), validated before anything is stored; it may write
  or update up to three memories per turn;
* ``langmem``: langmem's own ``create_memory_store_manager`` on the same store
  (its items live in ``("dmt", "langmem", <user hash>)``); each memory it writes is
  mirrored as a consolidated record. A model with ``supports_tools=True`` is
  driven through ``ChatOpenAI``; a local endpoint (``kind="local"``) through
  ``memory.backends.langchain_chat.ProxyChatModel``, whose tool calls come from the proxy's
  constrained local layer (one call per model turn, a call always required).

``manager="auto"`` picks ``langmem`` only for a model that makes tool calls itself
(``supports_tools``) and ``json`` for the local models, from
``benchmarks/results/langmem_manager/langmem_manager.md`` (qwen2.5-1.5b, the first 7 turns of one
8-turn conversation, both managers interleaved): the JSON manager wrote in a median 11 s
(p95 62 s) and its memories held 7 of 9 asked facts; langmem's manager took a
median 52 s (p95 284 s: on updates trustcall's ``PatchDoc`` call, with its
free-text ``planned_edits``, ran into the 120 s timeout and trustcall retried) and
held 2 of 9: its patches overwrote earlier memories, and once it stored trustcall's
retry prompt (the timeout message) as a memory.
``manager="langmem"`` stays available for local models.
``stats`` counts which manager ran, how often it failed and what it wrote.

Audit fields survive consolidation. A consolidated memory keeps a snapshot of
the audit state of every interaction it was derived from (``sources``) plus its
own verdict if it was audited directly; its status and tag are
``combine_audit`` of those: never cleaner than its dirtiest source, carrying the
highest-scoring tag. ``update()`` on a source re-computes every memory derived
from it, so a tag that arrives after consolidation still reaches the derived
text. Deleting a source keeps its snapshot (the derived text still contains it).
A failed manager run never fails the write: the verbatim record is stored first.

Erasure (``erase(user)``): the user's namespaces (interactions, consolidated memories
and what langmem's own manager kept) are emptied and the store's file compacted (WAL
truncated, ``VACUUM``). The manager's model saw the text when it ran; a hosted model
keeps what its provider keeps, outside the proxy.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import warnings
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from dmt_proxy.embedder import EMBEDDING_DIMS
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.consolidation import CONSOLIDATE_PROMPT_VERSION, plan_consolidation
from dmt_proxy.memory.backends.lg_store import IndexedSqliteStore
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
    stamped_provenance,
)
from dmt_proxy.memory.registry import BackendConfig, BackendPlugin, register_backend
from dmt_proxy.provenance import AuditStamp, Provenance
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint

log = logging.getLogger(__name__)

INTERACTION = "interaction"
CONSOLIDATED = "consolidated"
_PAGE = 1000
MANAGER_MAX_TOKENS = 400
"""Output budget of one manager call (the JSON plan's, for langmem's manager on local models)."""


@dataclass
class ManagerStats:
    """Which consolidation path ran, and what it did (since open)."""

    json_runs: int = 0
    langmem_runs: int = 0
    failures: int = 0
    created: int = 0
    updated: int = 0
    restated: int = 0
    """Plan entries that repeated a memory's text verbatim: a source added, nothing new."""
    last_path: str | None = None


def _same_text(a: str, b: str) -> bool:
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _state_dict(state: AuditState) -> dict[str, Any]:
    return {
        "status": state.status.value,
        "tag": state.tag.model_dump(mode="json") if state.tag else None,
    }


def _state(raw: dict[str, Any]) -> AuditState:
    tag = raw.get("tag")
    return AuditState(
        status=AuditStatus(raw["status"]), tag=BiasTag.model_validate(tag) if tag else None
    )


def _value(record: MemoryRecord, kind: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    value = {
        "id": record.id,
        "kind": kind,
        "text": record.text,
        "user": record.scope.user,
        "agent": record.scope.agent,
        "session": record.scope.session,
        "query": record.query,
        "answer": record.answer,
        "created_at": record.created_at.isoformat(),
        "updated_at": (record.updated_at or record.created_at).isoformat(),
        "audit_status": record.audit_status.value,
        "tag": record.tag.model_dump(mode="json") if record.tag else None,
        "metadata": record.metadata,
        "provenance": record.provenance.model_dump(mode="json") if record.provenance else None,
        "schema_version": record.schema_version,
    }
    value.update(extra or {})
    return value


def _record(value: dict[str, Any]) -> MemoryRecord:
    metadata = dict(value.get("metadata") or {})
    if value.get("kind") == CONSOLIDATED:
        metadata.update(
            kind=CONSOLIDATED,
            sources=sorted(value.get("sources", {})),
            manager=value.get("manager"),
        )
    return MemoryRecord(
        id=value["id"],
        scope=Scope(user=value["user"], agent=value.get("agent"), session=value.get("session")),
        text=value["text"],
        query=value.get("query"),
        answer=value.get("answer"),
        created_at=datetime.fromisoformat(value["created_at"]),
        updated_at=datetime.fromisoformat(value["updated_at"]),
        audit_status=AuditStatus(value["audit_status"]),
        tag=BiasTag.model_validate(value["tag"]) if value.get("tag") else None,
        metadata=metadata,
        provenance=Provenance.model_validate(raw) if (raw := value.get("provenance")) else None,
        schema_version=int(value.get("schema_version", 1)),
    )


def _recompute(value: dict[str, Any]) -> dict[str, Any]:
    states = [_state(s) for s in value.get("sources", {}).values()]
    if value.get("own"):
        states.append(_state(value["own"]))
    combined = combine_audit(states)
    return {**value, **{"audit_status": combined.status.value, "tag": _state_dict(combined)["tag"]}}


@register_backend("langmem")
class LangMemBackend(BackendPlugin):
    """Verbatim interactions plus optional LLM-managed consolidated memories."""

    name: ClassVar[str]

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid")
        consolidate: bool = False
        manager: Literal["auto", "json", "langmem"] = "auto"
        related_k: int = Field(default=5, ge=0, le=50)
        """How many existing consolidated memories the manager sees."""
        min_score: float = Field(default=0.0, ge=-1.0, le=1.0)

    def __init__(
        self,
        store: IndexedSqliteStore,
        options: Options,
        *,
        chat: ChatModel | None = None,
        llm: ModelEndpoint | None = None,
        manager_path: Literal["json", "langmem"] | None = None,
        tool_model: Any = None,
    ) -> None:
        self._store = store
        self._options = options
        self._chat = chat
        self._llm = llm
        self._tool_model = tool_model
        self._langmem: Any = None
        self.stats = ManagerStats()
        self.manager_path = manager_path
        """Which manager runs after each new interaction (None: consolidation off)."""

    @classmethod
    async def open(
        cls, config: BackendConfig, options: LangMemBackend.Options, *, tool_model: Any = None
    ) -> LangMemBackend:
        """Open ``<state_dir>/memory/langmem/store.sqlite``.

        ``tool_model`` (a langchain chat model) replaces the ``ChatOpenAI`` client that
        langmem's own manager would otherwise build from ``config.llm``.
        """
        path: Literal["json", "langmem"] | None = None
        if options.consolidate:
            native = tool_model is not None or (
                config.llm is not None and config.llm.supports_tools
            )
            # Local endpoints get their tool calls from the proxy (backends.langchain_chat).
            local = (
                config.llm is not None and config.llm.kind == "local" and config.chat is not None
            )
            path = (
                "langmem"
                if options.manager == "langmem" or (options.manager == "auto" and native)
                else "json"
            )
            if path == "json" and (config.chat is None or config.llm is None):
                raise ConfigError(
                    "langmem consolidation needs a chat model (config.chat and config.llm)"
                )
            if path == "langmem" and not (native or local):
                raise ConfigError(
                    "langmem's own manager needs a model that makes tool calls "
                    "(llm.supports_tools) or a local endpoint (llm.kind 'local') with a chat "
                    "model; use manager 'json'"
                )
        file = config.store_dir("langmem") / "store.sqlite"
        embedder = config.shared_embedder()
        try:
            store = IndexedSqliteStore(
                file, embed=embedder.embed, dims=EMBEDDING_DIMS, fields=("text", "content.content")
            )
        except Exception as exc:  # sqlite3.DatabaseError and friends: a broken store file
            raise ConfigError(f"langmem store {file} cannot be opened: {exc}") from exc
        return cls(
            store,
            options,
            chat=config.chat,
            llm=config.llm,
            manager_path=path,
            tool_model=tool_model,
        )

    @staticmethod
    def _ns(scope: Scope) -> tuple[str, ...]:
        return ("dmt", "memories", scope.user_key)

    @staticmethod
    def _scope_filter(scope: Scope) -> dict[str, Any]:
        flt: dict[str, Any] = {}
        if scope.agent is not None:
            flt["agent"] = scope.agent
        if scope.session is not None:
            flt["session"] = scope.session
        return flt

    async def _find(self, scope: Scope, id: str) -> dict[str, Any] | None:
        item = await self._store.aget(self._ns(scope), id)
        if item is not None and scope.sees(_record(item.value).scope):
            return dict(item.value)
        return None

    async def _put(self, value: dict[str, Any]) -> None:
        namespace = ("dmt", "memories", Scope(user=value["user"]).user_key)
        await self._store.aput(namespace, value["id"], value, index=["text"])

    async def search(
        self, scope: Scope, query: str, k: int = 5, *, include_quarantined: bool = False
    ) -> list[SearchHit]:
        if nothing_to_search(query, k):
            return []
        flt = self._scope_filter(scope)
        if not include_quarantined:
            flt["audit_status"] = {"$ne": AuditStatus.QUARANTINED.value}
        items = await self._store.asearch(self._ns(scope), query=query, filter=flt, limit=k)
        hits = [SearchHit(record=_record(i.value), score=float(i.score or 0.0)) for i in items]
        return [
            h for h in hits if h.score >= self._options.min_score and scope.sees(h.record.scope)
        ]

    async def write(self, scope: Scope, record: MemoryRecord) -> MemoryRecord:
        check_write(scope, record)
        if any(ns != self._ns(scope) for ns in self._store.namespaces_of(record.id)):
            raise RecordConflict(f"record {record.id} belongs to another user")
        old = await self._store.aget(self._ns(scope), record.id)
        if old is not None:
            record = record.model_copy(
                update={"created_at": datetime.fromisoformat(old.value["created_at"])}
            )
        await self._put(_value(record, INTERACTION))
        if old is None and self.manager_path is not None:
            await self._consolidate(scope, record)
        return record

    async def _consolidate(self, scope: Scope, record: MemoryRecord) -> None:
        try:
            if self.manager_path == "langmem":
                await self._consolidate_langmem(scope, record)
                self.stats.langmem_runs += 1
            else:
                await self._consolidate_json(scope, record)
                self.stats.json_runs += 1
            self.stats.last_path = self.manager_path
        except Exception:
            # The verbatim record is already stored; a failed manager run is counted
            # and logged, never allowed to fail the write (and so the outbox).
            self.stats.failures += 1
            log.exception(
                "memory consolidation (%s) failed for record %s", self.manager_path, record.id
            )

    def _source(self, record: MemoryRecord) -> dict[str, Any]:
        return {record.id: _state_dict(AuditState(status=record.audit_status, tag=record.tag))}

    async def _derive(
        self,
        scope: Scope,
        record: MemoryRecord,
        text: str,
        target: dict[str, Any] | None,
        manager: str,
        key: str | None = None,
    ) -> dict[str, Any]:
        now = datetime.now(UTC).isoformat()
        if target is not None and _same_text(target["text"], text):
            # Same words: the verdict on them still holds; only the new source is recorded.
            value = {**target, "updated_at": now}
            value["sources"] = {**target.get("sources", {}), **self._source(record)}
            self.stats.restated += 1
        elif target is not None:
            # New text: a verdict on the old text no longer applies (sources' states do).
            value = {**target, "text": text, "updated_at": now, "own": None}
            value["sources"] = {**target.get("sources", {}), **self._source(record)}
            self.stats.updated += 1
        else:
            base = MemoryRecord(id=key or str(uuid.uuid4()), scope=scope, text=text)
            value = _value(
                base,
                CONSOLIDATED,
                {"sources": self._source(record), "own": None, "manager": manager},
            )
            self.stats.created += 1
        value = _recompute(value)
        await self._put(value)
        return value

    async def _consolidate_json(self, scope: Scope, record: MemoryRecord) -> None:
        assert self._chat is not None and self._llm is not None
        flt = {
            **self._scope_filter(scope),
            "kind": CONSOLIDATED,
            "audit_status": {"$ne": AuditStatus.QUARANTINED.value},
        }
        related = []
        if self._options.related_k:
            related = await self._store.asearch(
                self._ns(scope), query=record.text, filter=flt, limit=self._options.related_k
            )
        existing = [dict(item.value) for item in related]
        plan = await plan_consolidation(
            self._chat,
            self._llm,
            [v["text"] for v in existing],
            record.query if record.query is not None else record.text,
            record.answer or "",
        )
        for memory in plan.memories:
            index = memory.target
            target = existing[index] if index is not None and index < len(existing) else None
            if target is None:
                # Small models often restate a memory they were shown as a new one; the same
                # words become a new source of that memory, not a duplicate.
                target = next((v for v in existing if _same_text(v["text"], memory.content)), None)
            value = await self._derive(
                scope, record, memory.content, target, CONSOLIDATE_PROMPT_VERSION
            )
            if target is None:
                existing.append(value)

    def _chat_openai(self) -> Any:
        from langchain_openai import ChatOpenAI

        assert self._llm is not None
        return ChatOpenAI(
            model=self._llm.model.removeprefix("openai/"),
            base_url=self._llm.api_base,
            api_key=SecretStr(self._llm.api_key or "local"),
            temperature=0,
            timeout=self._llm.timeout_s,
        )

    def _manager_model(self) -> Any:
        """The langchain model langmem's manager drives: ours for local endpoints."""
        assert self._llm is not None
        if self._llm.kind == "local" and self._chat is not None:
            from dmt_proxy.memory.backends.langchain_chat import ProxyChatModel

            # The JSON manager's budget: trustcall's free-text fields (PatchDoc's
            # planned_edits) would otherwise run on until the call times out.
            return ProxyChatModel(
                self._chat, self._llm, force_tool_call=True, max_tokens=MANAGER_MAX_TOKENS
            )
        return self._chat_openai()

    async def _consolidate_langmem(self, scope: Scope, record: MemoryRecord) -> None:
        if self._langmem is None:
            with warnings.catch_warnings():
                # trustcall (langmem's extractor) imports Send from its pre-1.0 place.
                warnings.simplefilter("ignore", DeprecationWarning)
                from langmem import create_memory_store_manager

            model = self._tool_model or self._manager_model()
            self._langmem = create_memory_store_manager(
                model,
                namespace=("dmt", "langmem", "{langgraph_user_id}"),
                store=self._store,
                enable_inserts=True,
                enable_deletes=False,
            )
        messages = [
            {"role": "user", "content": record.query if record.query is not None else record.text},
            {"role": "assistant", "content": record.answer or ""},
        ]
        puts = await self._langmem.ainvoke(
            {"messages": messages}, config={"configurable": {"langgraph_user_id": scope.user_key}}
        )
        for put in puts:
            content = put["value"].get("content")
            text = content.get("content") if isinstance(content, dict) else content
            if not isinstance(text, str) or not text.strip():
                continue
            mirror = await self._store.aget(self._ns(scope), put["key"])
            await self._derive(
                scope,
                record,
                text,
                dict(mirror.value) if mirror else None,
                "langmem",
                key=put["key"],
            )

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
        if audit_status.needs_tag and tag is None:
            raise ValueError(f"audit_status '{audit_status.value}' requires a tag")
        value = await self._find(scope, id)
        if value is None:
            return None
        now = datetime.now(UTC).isoformat()
        if value["kind"] == CONSOLIDATED:
            value = _recompute({**value, "own": _state_dict(state), "updated_at": now})
        else:
            provenance = stamped_provenance(_record(value).provenance, audited)
            value = {
                **value,
                "audit_status": audit_status.value,
                "updated_at": now,
                "tag": _state_dict(state)["tag"],
                "provenance": provenance.model_dump(mode="json") if provenance else None,
            }
            await self._propagate(value["user"], id, state)
        await self._put(value)
        return _record(value)

    async def _propagate(self, user: str, source_id: str, state: AuditState) -> None:
        for derived in await self._all(Scope(user=user), kind=CONSOLIDATED):
            if source_id in derived.get("sources", {}):
                derived["sources"] = {**derived["sources"], source_id: _state_dict(state)}
                await self._put(_recompute(derived))

    async def _all(self, scope: Scope, *, kind: str | None = None) -> list[dict[str, Any]]:
        flt = self._scope_filter(scope)
        if kind is not None:
            flt["kind"] = kind
        values: list[dict[str, Any]] = []
        offset = 0
        while True:
            page = await self._store.asearch(
                self._ns(scope), filter=flt or None, limit=_PAGE, offset=offset
            )
            values.extend(dict(item.value) for item in page)
            if len(page) < _PAGE:
                return values
            offset += _PAGE

    async def get(self, scope: Scope, id: str) -> MemoryRecord | None:
        value = await self._find(scope, id)
        return None if value is None else _record(value)

    async def scope_of(self, id: str) -> Scope | None:
        for namespace in self._store.namespaces_of(id):
            if namespace[:2] == ("dmt", "memories"):
                item = await self._store.aget(namespace, id)
                if item is not None:
                    return _record(item.value).scope
        return None

    async def list(self, scope: Scope, *, limit: int | None = None) -> list[MemoryRecord]:
        records = sorted((_record(v) for v in await self._all(scope)), key=lambda r: r.created_at)
        return records if limit is None else records[:limit]

    async def delete(self, scope: Scope, id: str) -> bool:
        if await self._find(scope, id) is None:
            return False
        await self._store.adelete(self._ns(scope), id)
        return True

    async def delete_all(self, scope: Scope) -> int:
        values = await self._all(scope)
        for value in values:
            await self._store.adelete(self._ns(scope), value["id"])
        if scope.agent is None and scope.session is None:
            # Forgetting a user also forgets what langmem's own manager kept about them.
            own = ("dmt", "langmem", scope.user_key)
            while items := await self._store.asearch(own, limit=_PAGE):
                for item in items:
                    await self._store.adelete(own, item.key)
        return len(values)

    async def erase(self, user: str, *, full: bool = False) -> StoreErasure:
        """Delete every memory of ``user`` (``delete_all``) and compact the store's file."""
        deleted = await self.delete_all(Scope(user=user))
        path = await asyncio.to_thread(self._store.compact)
        return StoreErasure(deleted=deleted, compacted=[path])

    async def close(self) -> None:
        self._store.close()
