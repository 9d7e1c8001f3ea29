"""What ``dmt-proxy demo`` prints: pure functions over the memories the admin API lists
(``MemoryEntry``, read back from ``GET /v1/memories``).

Kept apart from the process and network plumbing in ``demo.py`` so the wording
can be tested without a model.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.tags import AuditStatus, BiasTag

INDENT = "      "
FINAL = frozenset(
    {AuditStatus.CLEAN, AuditStatus.TAGGED, AuditStatus.QUARANTINED, AuditStatus.FAILED}
)
"""Statuses an audit ends in; ``unaudited`` is not one (it was never sent to the auditor)."""


@dataclass(frozen=True)
class Remark:
    """One thing the demo user says, and what the demo calls it."""

    label: str
    text: str


def settled(entry: MemoryEntry) -> bool:
    """Whether ``entry``'s audit has ended (``FINAL``)."""
    return entry.audit_status in FINAL


def label_of(row: MemoryEntry, remarks: Sequence[Remark]) -> str:
    """Which remark ``row`` stores (its text starts ``User: <remark>``), or 'other'."""
    for remark in remarks:
        if row.text.startswith(f"User: {remark.text}"):
            return remark.label
    return "other"


def describe_tag(tag: BiasTag) -> str:
    """A tag in one phrase: ``age, score 0.90 (older workers; favoring youth)``."""
    return f"{tag.bias_type}, score {tag.score:.2f} ({tag.target_group}; {tag.tendency})"


def verdict_line(row: MemoryEntry, label: str) -> str:
    """The line printed when a memory's audit finishes."""
    status = row.audit_status.value
    if row.tag is not None and row.audit_status in (AuditStatus.TAGGED, AuditStatus.QUARANTINED):
        return f"{INDENT}{label} remark -> {status}: {describe_tag(row.tag)}"
    if row.audit_status is AuditStatus.FAILED:
        return f"{INDENT}{label} remark -> failed: the auditor gave no valid verdict"
    return f"{INDENT}{label} remark -> {status}"


def progress_line(rows: Sequence[MemoryEntry], expected: int, elapsed_s: float) -> str:
    """A one-line progress report while the audits run."""
    done = sum(1 for r in rows if settled(r))
    stored = len(rows)
    where = f"{done} of {expected} audited"
    if stored < expected:
        where += f", {expected - stored} not yet stored"
    return f"{INDENT}waiting for the auditor: {where} ({elapsed_s:.0f}s)"


def timeout_message(
    rows: Sequence[MemoryEntry], expected: int, timeout_s: float, outbox: Mapping[str, Any] | None
) -> str:
    """Why the demo gave up waiting, and what to look at."""
    done = sum(1 for r in rows if settled(r))
    msg = (
        f"the auditor had not finished after {timeout_s:.0f}s: {done} of {expected} "
        "memories audited"
    )
    if outbox is not None:
        msg += (
            f"; {outbox.get('depth', '?')} write(s) still in the outbox, the oldest "
            f"{float(outbox.get('oldest_pending_age_s', 0.0)):.0f}s old"
        )
    return msg + ". The local auditor may just be slow here: retry with a larger --audit-timeout."


def memory_block(messages: Sequence[Mapping[str, Any]]) -> str | None:
    """The system message carrying retrieved memories, as the proxy rendered it."""
    for message in messages:
        content = message.get("content")
        is_system = message.get("role") == "system"
        if is_system and isinstance(content, str) and content.startswith("<memories-"):
            return content
    return None


def abbreviate(block: str, width: int = 110) -> str:
    """``block`` with each line cut to ``width`` characters, for a terminal."""
    lines = []
    for line in block.splitlines():
        lines.append(line if len(line) <= width else line[: width - 2] + " …")
    return "\n".join(lines)


def indented(text: str, prefix: str = INDENT + "  ") -> str:
    """``text`` with every line indented under the step it belongs to."""
    return textwrap.indent(text, prefix, lambda _line: True)


def labelled(label: str, text: str, *, indent: str = INDENT, width: int = 100) -> str:
    """``label: text``, wrapped under the label, for remarks and answers."""
    lead = f"{indent}{label}: "
    hang = " " * len(lead)
    paragraphs = [p.strip() for p in text.strip().splitlines() if p.strip()] or ["(empty)"]
    return "\n".join(
        textwrap.fill(
            p, width=width, initial_indent=lead if i == 0 else hang, subsequent_indent=hang
        )
        for i, p in enumerate(paragraphs)
    )


def summary_line(rows: Sequence[MemoryEntry], *, tag_in_prompt: bool) -> str:
    """The demo's last line: how many memories were tagged and whether the tag travelled."""
    tagged = [r for r in rows if r.tag is not None and r.audit_status is not AuditStatus.CLEAN]
    head = f"{len(tagged)} of {len(rows)} memories tagged"
    if not tagged:
        return head + "; nothing to carry into the next request"
    kinds = "; ".join(f"{r.tag.bias_type}, score {r.tag.score:.2f}" for r in tagged if r.tag)
    head += f" ({kinds})"
    if tag_in_prompt:
        return head + "; the tag travelled with the memory into the next request"
    return head + "; but the tag was not in the next request's memory block"
