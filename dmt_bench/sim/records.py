"""What a simulation thread leaves on disk: one line per turn, one file per audit.

Layout of a thread directory (``<run>/<memory>/<condition>/``)::

    turns.jsonl          TurnRecord per line, t = 1..T (a resumed turn may repeat a
                         line; readers keep the first line of each t)
    audits/t0000.json    AuditRecord: the DIB decisions at checkpoint t

Files are written atomically (temporary file, then rename), so a killed run
leaves either the old or the new version, never half of one.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_bench.dib.scorer import DecisionResult, ScoringConfig
from dmt_bench.jsonl import append_record, read_records


class TurnRecord(BaseModel):
    """One day of the simulation for one condition."""

    model_config = ConfigDict(frozen=True)
    t: int
    question_id: int
    injected: bool
    domain: str | None
    strategy: str | None
    reply: str
    latency_s: float
    memory_status: str | None
    """The stored memory's audit status after the outbox drained (tagged/clean/unaudited...)."""
    tag: dict[str, object] | None = None
    recovered: bool = False
    """The request had already reached the proxy before a crash: not sent again."""
    drain_s: float = 0.0


class AuditRecord(BaseModel):
    """The DIB decisions of one checkpoint (retrieve-only)."""

    model_config = ConfigDict(frozen=True)
    t: int
    memories: int
    """Memories the condition's user held at this checkpoint."""
    scoring: ScoringConfig
    elapsed_s: float
    shared_from: str | None = None
    """For t=0 audits shared between conditions: where the decisions were measured."""
    results: list[DecisionResult]


def audit_path(thread_dir: Path, t: int) -> Path:
    return thread_dir / "audits" / f"t{t:04d}.json"


def read_audit(path: Path) -> AuditRecord | None:
    """The audit at ``path``, or None if it was never written."""
    if not path.exists():
        return None
    return AuditRecord.model_validate_json(path.read_text(encoding="utf-8"))


def read_audits(thread_dir: Path) -> dict[int, AuditRecord]:
    """Every audit of a thread, by checkpoint."""
    out: dict[int, AuditRecord] = {}
    for path in sorted((thread_dir / "audits").glob("t*.json")):
        record = read_audit(path)
        if record is not None:
            out[record.t] = record
    return out


def append_turn(thread_dir: Path, record: TurnRecord) -> None:
    """Append one turn line (flushed and synced)."""
    thread_dir.mkdir(parents=True, exist_ok=True)
    append_record(thread_dir / "turns.jsonl", record, sync=True)


def read_turns(thread_dir: Path) -> list[TurnRecord]:
    """Turn records in t order, first line per t (a partial last line is ignored)."""
    seen: dict[int, TurnRecord] = {}
    for record in read_records(thread_dir / "turns.jsonl", TurnRecord):
        seen.setdefault(record.t, record)
    return [seen[t] for t in sorted(seen)]
