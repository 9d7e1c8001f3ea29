"""On-disk layout of the ``letta`` paging backend (one SQLite file per state dir)."""

from __future__ import annotations

import numpy as np

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id TEXT PRIMARY KEY,
    user_key TEXT NOT NULL,
    core_key TEXT NOT NULL,
    user TEXT NOT NULL,
    agent TEXT,
    session TEXT,
    tier TEXT NOT NULL CHECK (tier IN ('core', 'archival')),
    kind TEXT NOT NULL CHECK (kind IN ('interaction', 'summary')),
    seq INTEGER NOT NULL,
    summarized INTEGER NOT NULL DEFAULT 1,
    audit_status TEXT NOT NULL,
    body TEXT NOT NULL,
    embedding BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS records_core ON records (core_key, tier, kind, seq);
CREATE INDEX IF NOT EXISTS records_user ON records (user_key, tier);
CREATE TABLE IF NOT EXISTS summary_sources (
    summary_id TEXT NOT NULL,
    source_id TEXT NOT NULL,
    state TEXT NOT NULL,
    PRIMARY KEY (summary_id, source_id)
);
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
"""


def vector_blob(vector: list[float]) -> bytes:
    """A float32 embedding as stored in ``records.embedding``."""
    return np.asarray(vector, dtype=np.float32).tobytes()
