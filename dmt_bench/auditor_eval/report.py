"""Auditor-eval reports: a JSON document (summary + every item) and a markdown table."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_bench.auditor_eval.metrics import Quality, Summary
from dmt_bench.auditor_eval.runner import ItemResult
from dmt_bench.stats import Estimate

REPORT_VERSION = "auditor_eval_report_v2"
"""v2: verdict path, pipeline, forced flags (disputes, manipulation), recall by form and
setting, LLM calls and throughput."""


class RunInfo(BaseModel):
    """What was run, for the report header."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    litellm_model: str
    api_base: str | None
    prompt_version: str
    dataset: str
    split: str
    limit: int | None
    structured_output: str
    concurrency: int
    started_at: str
    wall_s: float
    verdict: str = "json"
    """The verdict path the auditor ended on (``logprob`` or ``json``)."""
    auditor: str = ""
    pipeline: bool = False
    """Normalisation + embedding first stage (two judges) + LLM, as the proxy runs it."""
    command: str = ""
    resumed: int = 0
    """Items read back from a checkpoint of an interrupted run (not timed in ``wall_s``)."""

    def audits_per_s(self, n: int) -> float:
        """Items audited per wall second in this process (resumed items excluded)."""
        done = n - self.resumed
        return done / self.wall_s if self.wall_s > 0 and done > 0 else float("nan")


def _num(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _est(e: Estimate) -> str:
    if math.isnan(e.value):
        return "n/a"
    return f"{e.value:.2f} [{_num(e.ci.low)}, {_num(e.ci.high)}]"


def _quality_row(name: str, q: Quality) -> str:
    c = q.counts
    return (
        f"| {name} | {q.n} | {c.tp} | {c.fp} | {c.fn} | {c.tn} | {_est(q.precision)} | "
        f"{_est(q.recall)} | {_est(q.f1)} |"
    )


_QUALITY_HEADER = (
    "| group | n | TP | FP | FN | TN | precision [95% CI] | recall [95% CI] | F1 [95% CI] |\n"
    "|---|---|---|---|---|---|---|---|---|"
)


def to_json(info: RunInfo, summary: Summary, results: Sequence[ItemResult]) -> dict[str, Any]:
    """The full report document (NaN written as null)."""
    items = []
    for r in results:
        entry: dict[str, Any] = {
            "id": r.item.id, "label": r.item.label, "kind": r.item.kind, "domain": r.item.domain,
            "strategy": r.item.strategy, "split": r.item.split, "latency_s": round(r.latency_s, 3),
        }  # fmt: skip
        entry["item"] = r.item.model_dump(mode="json", exclude_none=True)
        if r.verdict is not None:
            entry["verdict"] = r.verdict.model_dump(mode="json", exclude_none=True)
        if r.error is not None:
            entry["error"] = r.error
        items.append(entry)
    doc = {
        "report_version": REPORT_VERSION,
        "run": info.model_dump(mode="json"),
        "summary": summary.model_dump(mode="json"),
        "items": items,
    }
    return _nan_to_none(doc)  # type: ignore[no-any-return]


def _nan_to_none(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nan_to_none(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_to_none(v) for v in value]
    return value


def to_markdown(info: RunInfo, summary: Summary) -> str:
    """A human-readable report of one run."""
    s = summary
    subset = f"stratified subset of {info.limit}" if info.limit else "all items"
    lines = [
        f"# Auditor evaluation: {info.model} ({info.prompt_version}, {info.verdict} verdicts"
        + (", full pipeline)" if info.pipeline else ")"),
        "",
        f"Dataset `{info.dataset}`, split `{info.split}`, {subset} (n = {s.n}); "
        f"tau = {s.tau:.2f}; auditor `{info.auditor}`; "
        f"litellm model `{info.litellm_model}`"
        + (f" at `{info.api_base}`" if info.api_base else "")
        + f"; concurrency {info.concurrency}; run {info.started_at}, wall {info.wall_s:.0f} s"
        + (f" ({info.resumed} items resumed from a checkpoint)" if info.resumed else "")
        + ".",
        "",
        *([f"Rerun: `{info.command}`", ""] if info.command else []),
        "Flagged = valid verdict with bias_detected and score >= tau, or (full pipeline) a "
        "dispute of the two judges or a manipulation finding, which the agent sees as tagged. "
        "Failed verdicts and upstream errors count as not flagged. Intervals: Wilson "
        "(proportions), bootstrap over items (F1). Per-domain rows hold that domain's biased "
        "texts and its hard negatives (plain questions count only overall).",
        "",
        "## Detection",
        "",
        _QUALITY_HEADER,
        _quality_row("**overall**", s.overall),
        *[_quality_row(d, q) for d, q in s.per_domain.items() if q.n],
        "",
        "## By injection strategy (recall) and by kind of neutral text (false-positive rate)",
        "",
        "| group | rate [95% CI] | k / n |",
        "|---|---|---|",
        *[
            f"| recall, {k} | {_est(e)} | {e.k} / {e.n} |"
            for k, e in s.recall_per_strategy.items()
            if e.n
        ],
        *[
            f"| false positives, {k} | {_est(e)} | {e.k} / {e.n} |"
            for k, e in s.false_positive_rate.items()
        ],
        *[
            f"| recall, form {k} | {_est(e)} | {e.k} / {e.n} |"
            for k, e in s.recall_per_form.items()
        ],
        *[
            f"| recall, setting {k} | {_est(e)} | {e.k} / {e.n} |"
            for k, e in s.recall_per_setting.items()
        ],
        "",
        "## Verdicts",
        "",
        "| measure | value |",
        "|---|---|",
        f"| AUC of the scores (threshold-free) | {_num(s.auc)} |",
        f"| domain (bias-type) accuracy on true positives | {_est(s.bias_type_accuracy)} "
        f"({s.bias_type_accuracy.k} / {s.bias_type_accuracy.n}) |",
        f"| failure rate (no valid verdict: JSON after repair, or log-prob answer) | "
        f"{_est(s.failure_rate)} "
        f"({s.failure_rate.k} / {s.failure_rate.n}) |",
        f"| valid only after the repair retry (JSON path) | {s.repaired} |",
        f"| upstream error rate | {_est(s.error_rate)} |",
        f"| latency p50 / p95 (s) | {_num(s.latency_p50_s, 1)} / {_num(s.latency_p95_s, 1)} |",
        f"| audits per second (this run, concurrency {info.concurrency}) | "
        f"{_num(info.audits_per_s(s.n), 3)} |",
        f"| LLM calls (items not decided by the first stage alone) | {s.llm_calls} / {s.n} |",
        f"| flagged whatever tau (disputes, manipulation findings) | {s.forced} |",
        "",
        "## Threshold sweep",
        "",
        "| tau | precision | recall | F1 |",
        "|---|---|---|---|",
        *[
            f"| {t} | {_num(q.precision.value)} | {_num(q.recall.value)} | {_num(q.f1.value)} |"
            for t, q in s.tau_sweep.items()
        ],
        "",
    ]
    return "\n".join(lines)


def write_reports(
    out_dir: Path, stem: str, info: RunInfo, summary: Summary, results: Sequence[ItemResult]
) -> tuple[Path, Path]:
    """Write ``<stem>.json`` and ``<stem>.md`` under ``out_dir``; return both paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out_dir / f"{stem}.json", out_dir / f"{stem}.md"
    json_path.write_text(
        json.dumps(to_json(info, summary, results), indent=1, ensure_ascii=False) + "\n",
        encoding="utf-8",
    )
    md_path.write_text(to_markdown(info, summary), encoding="utf-8")
    return json_path, md_path
