"""Append-only JSONL record files, the resumable state of long benchmark runs.

A run appends one pydantic record per finished unit of work and reads them back on
resume. A writer killed mid-line leaves a torn last line; reading skips any line that
does not parse, so a resumed run redoes that one unit instead of failing.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypeVar

from pydantic import BaseModel

M = TypeVar("M", bound=BaseModel)


def read_records(path: Path, model: type[M]) -> list[M]:
    """Every line of ``path`` that parses as ``model``, in file order ([] without a file)."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        try:
            records.append(model.model_validate_json(line))
        except ValueError:
            continue  # a torn line of a killed writer
    return records


def append_record(path: Path, record: BaseModel, *, sync: bool = False) -> None:
    """Append ``record`` as one line; ``sync`` also flushes it to disk before returning."""
    with path.open("a", encoding="utf-8") as fh:
        fh.write(record.model_dump_json() + "\n")
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
