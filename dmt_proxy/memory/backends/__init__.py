"""The memory backends, one module each, with the helpers only they use beside them.

Each backend is one module registered with ``@register_backend`` and declared under
the ``dmt_proxy.memory_backends`` entry-point group (``dmt_proxy.memory.registry``):
``in_memory`` (``memory``: in-process, for tests), ``mem0_backend`` (mem0ai + local
Qdrant; ``mem0_partitions``), ``langmem_backend`` (a LangMem-style manager on a
langgraph store; ``lg_store``, ``langchain_chat``), ``letta_backend`` (MemGPT-style
paging; ``letta_schema``) and ``pg_backend`` (PostgreSQL with pgvector). Shared by
several: ``runner`` (the blocking-store thread), ``vectors`` (an in-RAM vector
matrix) and ``consolidation`` (the model's memory plan). Nothing outside a backend's
own module names it: what the rest of ``memory/`` needs to know about a store, the
backend declares (``BackendPlugin.store_database``). Importing this package imports
none of them.
"""
