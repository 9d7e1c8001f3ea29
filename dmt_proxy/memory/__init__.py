"""Long-term memory: the backend protocol, its registry and the built-in backends.

Backends (``await create_backend(name, BackendConfig(state_dir=...))``):
``mem0`` (mem0ai + local Qdrant), ``langmem`` (LangMem-style manager on a
langgraph store), ``letta`` (MemGPT-style paging) and ``memory`` (in-process
fake for tests). Importing this package does not import any of them, nor the
memory service (``dmt_proxy.memory.service``), which builds on ``dmt_proxy.audit``
while ``audit`` builds on the types here.
"""

from dmt_proxy.memory.base import (
    INTERACTION_FORMAT_V1,
    AuditState,
    MemoryBackend,
    MemoryRecord,
    MemoryStoreError,
    RecordConflict,
    Scope,
    SearchHit,
    StoreClosed,
    combine_audit,
    interaction_text,
)
from dmt_proxy.memory.registry import (
    BackendConfig,
    create_backend,
    known_backends,
    open_policy_backend,
    register_backend,
)

__all__ = [
    "INTERACTION_FORMAT_V1",
    "AuditState",
    "BackendConfig",
    "MemoryBackend",
    "MemoryRecord",
    "MemoryStoreError",
    "RecordConflict",
    "Scope",
    "SearchHit",
    "StoreClosed",
    "combine_audit",
    "create_backend",
    "interaction_text",
    "known_backends",
    "open_policy_backend",
    "register_backend",
]
