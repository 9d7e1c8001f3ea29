"""Human verdicts as a labelled, versioned dataset (``dmt-proxy reviews export``).

One JSON line per memory a reviewer decided: its text, the reviewer's label (biased
or not, and the domain), and what the machine knew when it decided (the verdict's
P_raw, the LLM's and the first stage's scores, P(biased), τ, the domain
probabilities). The first line is a header naming the format
(``REVIEWS_FORMAT``) and when it was exported; ``dmt-proxy calibrate --from-reviews``
reads it back. Users appear only as a digest (``Scope.user_key``), never by name.

The label is the newest human verdict that says something about bias (confirm,
clear, change domain, quarantine, release; not a re-audit or a deletion), and the
evidence is the machine verdict it answered (the newest machine event before it).
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.base import MemoryBackend, Scope
from dmt_proxy.memory.write.trail import REAUDIT, Trail, TrailEvent, now_utc

REVIEWS_FORMAT = "dmt-reviews/1"
"""The dataset's format; a change in a field's meaning bumps it."""
TAGGED = frozenset({"tagged", "disputed", "quarantined"})


class LabelledReview(BaseModel):
    """One memory, the reviewer's label and the machine's evidence."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: str
    user_key: str
    text: str = ""
    """The user's words as audited (empty when the memory is gone from the store)."""
    biased: bool
    domain: str | None = None
    action: str
    reviewer: str
    reviewed_at: datetime
    machine_status: str | None = None
    machine_domain: str | None = None
    auditor: str = ""
    p_raw: float | None = None
    llm_score: float | None = None
    p_biased: float | None = None
    tau: float | None = None
    first_stage_score: float | None = None
    domain_probs: dict[str, float] = Field(default_factory=dict)
    first_stage_domain_probs: dict[str, float] = Field(default_factory=dict)

    @property
    def machine_flagged(self) -> bool:
        """Whether the running auditor flagged it (tagged, disputed or quarantined)."""
        return self.machine_status in TAGGED


def label_of(history: list[TrailEvent]) -> tuple[TrailEvent, TrailEvent | None] | None:
    """The labelling human event of one memory's history and the machine event it answered."""
    human_index = next(
        (i for i in range(len(history) - 1, -1, -1)
         if history[i].human and history[i].action not in (REAUDIT, "delete")),
        None,
    )  # fmt: skip
    if human_index is None:
        return None
    machine = next((e for e in reversed(history[:human_index]) if not e.human), None)
    return history[human_index], machine


async def labelled_reviews(
    trail: Trail, backend: MemoryBackend, user_prefix: str | None = None
) -> list[LabelledReview]:
    """Every reviewed memory (of users starting with ``user_prefix``), oldest review first."""
    rows: list[LabelledReview] = []
    for latest in await trail.latest(user_prefix):
        found = label_of(await trail.history(latest.memory_id))
        if found is None:
            continue
        human, machine = found
        scope = Scope(user=human.user)
        record = await backend.get(scope, human.memory_id)
        verdict: dict[str, Any] = (machine.evidence or {}).get("verdict", {}) if machine else {}
        decision: dict[str, Any] = (machine.evidence or {}).get("decision", {}) if machine else {}
        first = verdict.get("first_stage") or {}
        ok = verdict.get("status", "ok") == "ok"
        rows.append(LabelledReview(
            memory_id=human.memory_id, user_key=scope.user_key,
            text=(record.query or record.text) if record else "",
            biased=human.after_status in TAGGED, domain=human.after_domain,
            action=human.action, reviewer=human.actor, reviewed_at=human.at,
            machine_status=machine.after_status if machine else None,
            machine_domain=machine.after_domain if machine else None,
            auditor=str(verdict.get("auditor", "")), p_raw=verdict.get("p_raw"),
            llm_score=verdict.get("llm_score") if verdict.get("llm_score") is not None
            else (verdict.get("score") if ok and verdict else None),
            p_biased=verdict.get("score") if ok and verdict else None, tau=decision.get("tau"),
            first_stage_score=first.get("score"),
            domain_probs=verdict.get("domain_probs") or {},
            first_stage_domain_probs=first.get("domain_probs") or {},
        ))  # fmt: skip
    rows.sort(key=lambda r: r.reviewed_at)
    return rows


def write_dataset(path: Path, rows: list[LabelledReview]) -> None:
    """Write ``rows`` as the versioned JSON-lines dataset (header first)."""
    header = {"format": REVIEWS_FORMAT, "exported_at": now_utc().isoformat(), "count": len(rows)}
    lines = [json.dumps(header)] + [r.model_dump_json() for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_dataset(path: Path) -> list[LabelledReview]:
    """Read a dataset ``write_dataset`` wrote; ``ConfigError`` for another format."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read reviews {path}: {exc.strerror or exc}") from exc
    header = json.loads(lines[0]) if lines else {}
    if header.get("format") != REVIEWS_FORMAT:
        raise ConfigError(f"{path} is not a {REVIEWS_FORMAT} dataset (dmt-proxy reviews export)")
    return [LabelledReview.model_validate_json(line) for line in lines[1:] if line.strip()]
