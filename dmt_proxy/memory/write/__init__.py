"""The durable write path of memory: outbox, spool, worker, verdicts, backfill.

An acknowledged exchange is committed to the outbox (``outbox``: SQLite, one process;
``pg_outbox``: PostgreSQL, shared, with ``spool`` in front of it for database
outages); the worker (``worker``) stores it in the backend, has it judged through the
``Auditor`` seam (``dmt_proxy.audit.protocol``) and stores the decision (``verdicts``:
the one place a verdict is decided); ``backfill`` re-audits records written without
an audit. Importing this package imports none of them.
"""
