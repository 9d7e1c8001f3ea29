"""The report of a live drift run: memory counts per target, drift vs baseline, t0 -> T."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_bench.iat.drift import (
    DriftReport,
    changes_markdown,
    changes_text,
    compare_results,
    drift_markdown,
    drift_text,
)
from dmt_bench.iat.live_plan import LIVE_VERSION, LiveSpec, ProbeTarget
from dmt_bench.iat.probe import RESULT_FILE
from dmt_bench.iat.report import Row

REPORT_FILE = "live_report.json"


class MemoryCount(BaseModel):
    """What a probed user's memory held (from the proxy's admin API)."""

    model_config = ConfigDict(frozen=True)

    total: int
    tagged: int
    """Audit status ``tagged`` or ``quarantined``."""
    pending: int


class TargetSummary(BaseModel):
    """One target in the live report."""

    model_config = ConfigDict(frozen=True)

    target: ProbeTarget
    memories: MemoryCount | None
    """None when the proxy's admin key was not available."""
    result_file: str


class LiveReport(BaseModel):
    """``live_report.json``: the spec, each target, and the drift reports."""

    model_config = ConfigDict(frozen=True)

    version: str = LIVE_VERSION
    spec: LiveSpec
    targets: tuple[TargetSummary, ...]
    overall: DriftReport
    per_condition: dict[str, DriftReport]
    """``<condition>@t0`` -> ``<condition>@T`` for every probed condition."""


def memory_count(memories: Sequence[dict[str, object]]) -> MemoryCount:
    """Counts of a user's memories as the admin API lists them."""
    statuses = [str(m.get("audit_status", "")) for m in memories]
    return MemoryCount(
        total=len(statuses),
        tagged=sum(s in ("tagged", "quarantined") for s in statuses),
        pending=sum(s == "pending" for s in statuses),
    )


def build_report(
    spec: LiveSpec,
    rows: Sequence[Row],
    counts: dict[str, MemoryCount | None],
    baseline: str | None = None,
) -> LiveReport:
    """The drift reports over the targets' results: vs the baseline, and t0 -> T per condition."""
    targets = spec.targets
    overall = compare_results(rows, baseline)
    per_condition: dict[str, DriftReport] = {}
    for condition in dict.fromkeys(t.condition for t in targets):
        pair = [r for r, t in zip(rows, targets, strict=True) if t.condition == condition]
        per_condition[condition] = compare_results(pair, f"{condition}@t0")
    summaries = tuple(
        TargetSummary(
            target=t,
            memories=counts.get(t.label),
            result_file=str(Path(t.probe) / RESULT_FILE),
        )
        for t in targets
    )
    return LiveReport(spec=spec, targets=summaries, overall=overall, per_condition=per_condition)


def _targets_lines(report: LiveReport) -> list[str]:
    lines = []
    for s in report.targets:
        t, m = s.target, s.memories
        mem = "memories n/a" if m is None else f"{m.total} memories ({m.tagged} tagged)"
        shared = f", answered by {t.probe} (identical requests at t0)" if t.shared else ""
        lines.append(f"- `{t.label}`: user `{t.user}`, mode {t.mode}, {mem}{shared}")
    return lines


def live_text(report: LiveReport, rows: Sequence[Row]) -> str:
    """Plain-text report: Table 3 of every target, changes vs baseline, t0 -> T per condition."""
    parts = [drift_text(report.overall, rows)]
    for condition, drift in report.per_condition.items():
        parts.append(f"{condition}, t0 -> T:\n{changes_text(drift)}")
    parts.append(
        "\n".join(line.removeprefix("- ").replace("`", "") for line in _targets_lines(report))
    )
    return "\n\n".join(parts)


def live_markdown(report: LiveReport, rows: Sequence[Row]) -> str:
    """Markdown report: the probed run and users, then the drift report."""
    spec = report.spec
    per = "\n\n".join(
        f"### {condition}\n\n{changes_markdown(drift)}"
        for condition, drift in report.per_condition.items()
    )
    head = f"""# IAT with memory: run `{spec.run_id}` ({spec.arch}), model `{spec.model}` ({LIVE_VERSION})

Run directory `{spec.run_dir}`; proxy: {spec.proxy}; every probe with `X-DMT-Memory:
read-only` in its condition's mode. `@t0`: a fresh user (empty memory); `@T`: the
condition's simulated user after the run.

{chr(10).join(_targets_lines(report))}

"""
    body = drift_markdown(report.overall, rows).replace("# IAT drift", "## IAT drift", 1)
    return f"{head}{body}\n## t0 -> T per condition\n\n{per}\n"


def write_live(report: LiveReport, rows: Sequence[Row], out: Path) -> None:
    """Write ``drift.json`` (the overall drift report), ``drift.md`` and ``live_report.json``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "drift.json").write_text(report.overall.model_dump_json(indent=1) + "\n", "utf-8")
    (out / "drift.md").write_text(live_markdown(report, rows), encoding="utf-8")
    (out / REPORT_FILE).write_text(report.model_dump_json(indent=1) + "\n", encoding="utf-8")
