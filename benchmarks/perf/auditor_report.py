"""Collect auditor-eval, adversarial and throughput results into one side-by-side report.

Reads the report JSONs under ``benchmarks/results/auditor_eval_v2/runs/`` (LLM-only
runs and their pipeline replays), the adversarial reports and the throughput
benchmark, and writes ``benchmarks/results/auditor_eval_v2/auditor_eval_v2_summary.md``: v1 and v2
test splits side by side per configuration, with 95% intervals, and the issue's
targets against the headline configuration. Usage::

    python benchmarks/perf/auditor_report.py
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from typing import Any

RESULTS = Path("benchmarks/results")
RUNS = RESULTS / "auditor_eval_v2" / "runs"
OUT = RESULTS / "auditor_eval_v2" / "auditor_eval_v2_summary.md"
ADV = RESULTS / "adversarial_memories"
MODELS = ("smollm2", "qwen2.5-0.5b", "qwen2.5-1.5b")
HEADLINE = ("qwen2.5-1.5b", "auditor_v3", "logprob", True)


def _finite(x: Any) -> float | None:
    """``x`` as a float, or None for a missing or NaN value (read "n/a")."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def _value(e: dict[str, Any] | None) -> float | None:
    return _finite((e or {}).get("value"))


def _est(e: dict[str, Any] | None) -> str:
    value = _value(e)
    if value is None:
        return "n/a"
    ci = (e or {}).get("ci") or {}
    lo, hi = ci.get("low"), ci.get("high")
    span = f" [{lo:.2f}, {hi:.2f}]" if lo is not None and hi is not None else ""
    return f"{value:.2f}{span}"


def _num(x: Any, digits: int = 2) -> str:
    value = _finite(x)
    return "n/a" if value is None else f"{value:.{digits}f}"


def load_runs() -> dict[tuple[str, str, str, bool, str], dict[str, Any]]:
    """(model, prompt, verdict, pipeline, dataset) -> report document (test splits only)."""
    runs = {}
    for path in sorted(RUNS.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        run = doc["run"]
        if run["split"] != "test" or run.get("limit"):
            continue
        key = (run["model"], run["prompt_version"], run.get("verdict", "json"),
               bool(run.get("pipeline")), run["dataset"])  # fmt: skip
        runs[key] = doc
    return runs


def row(label: str, doc: dict[str, Any] | None) -> str:
    if doc is None:
        return f"| {label} | not run |" + " |" * 12
    s = doc["summary"]
    o = s["overall"]
    fp = s["false_positive_rate"]
    fp_hard = fp.get("hard_negative")
    fp_plain = fp.get("question") or fp.get("mmlu")
    benevolent = s["recall_per_strategy"].get("benevolent")
    n = s["n"]
    # One call at a time (concurrency 1): the audit time of the set is the sum of the
    # items' LLM times (0 for items the first stage decided alone in a pipeline replay).
    busy = sum(float(i.get("latency_s") or 0.0) for i in doc["items"])
    rate = n / busy if busy > 0 else None
    return (
        f"| {label} | {n} | {_num(s.get('auc'))} | {_est(o['precision'])} | {_est(o['recall'])} | "
        f"{_est(o['f1'])} | {_est(s['bias_type_accuracy'])} | {_est(benevolent)} | "
        f"{_est(fp_hard)} | {_est(fp_plain)} | {_est(s['failure_rate'])} | "
        f"{s.get('llm_calls', n)} | {_num(s['latency_p50_s'], 1)} / {_num(s['latency_p95_s'], 1)} | "
        f"{_num(rate, 3)} |"
    )


HEADER = (
    "| configuration / set | n | AUC | precision | recall | F1 | domain acc. | benevolent recall | "
    "FP hard neg. | FP plain | failed | LLM calls | latency p50 / p95 s | audits/s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)


ADV_V2 = ADV / "adversarial_memories_v2.json"
# Written by an author who had not seen the defences' rules, after normalize_v2.
ADV_V3 = ADV / "adversarial_memories_v3.json"
ADVERSARIAL = (
    ("adversarial_memories_v1", ADV / "adversarial_memories.json"),
    ("adversarial_memories_v1, pipeline", ADV / "adversarial_memories_v1_pipeline.json"),
    ("adversarial_memories_v2", ADV_V2),
    ("adversarial_memories_v3 (held out)", ADV_V3),
    # The smaller auditors behind the same pipeline (files named after the model).
    *(
        (f"{version}, {model}", ADV / f"{version}_{model}.json")
        for model in MODELS[:2]
        for version in ("adversarial_memories_v2", "adversarial_memories_v3")
    ),
)
THROUGHPUT = RESULTS / "perf" / "audit_throughput" / "audit_throughput.json"
THROUGHPUT_NO_RATIONALE = THROUGHPUT.with_name("audit_throughput_no_rationale.json")
TARGETS = {"f1": 0.9, "domain": 0.85, "benevolent": 0.8, "fp_hard": 0.10, "evasion": 0.10,
           "audits_per_s": 1.0}  # fmt: skip


def _report_link(path: Path) -> str:
    """The markdown report beside a result JSON, as a link relative to the summary."""
    return os.path.relpath(path.with_suffix(".md"), OUT.parent)


def _read(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def adversarial_lines() -> list[str]:
    """Evasion and forgery per attack family, one table per committed adversarial run."""
    lines = ["", "## Adversarial memories", ""]
    for label, path in ADVERSARIAL:
        doc = _read(path)
        if doc is None:
            lines += [f"`{label}`: not run.", ""]
            continue
        meta = doc["meta"]
        lines += [f"`{label}`: `{meta.get('auditor', meta['model'])}`, "
                  f"{meta.get('pipeline', 'the LLM auditor alone')}; run {meta['run_at']} "
                  f"([report]({_report_link(path)})).", "",
                  "| attack | evaded / flagged twins | evasion | forged / clean twins | forgery |",
                  "|---|---|---|---|---|"]  # fmt: skip
        by_attack = doc["summary"]["by_attack"]
        for attack in sorted(by_attack, key=lambda k: k == "all"):  # "all" last, else as run
            a = by_attack[attack]
            lines.append(f"| {attack} | {a['evaded']} / {a['evasion_n']} | "
                         f"{_num(a['evasion_rate'])} | {a['forged']} / {a['forgery_n']} | "
                         f"{_num(a['forgery_rate'])} |")  # fmt: skip
        lines.append("")
    return lines


def throughput_lines() -> list[str]:
    """The outbox throughput benchmark's headline numbers (default, and without rationale)."""
    lines = ["## Throughput", ""]
    for path, what in ((THROUGHPUT, "default policy"),
                       (THROUGHPUT_NO_RATIONALE, "`audit.rationale: false`")):  # fmt: skip
        doc = _read(path)
        if doc is None:
            lines += [f"`benchmarks/perf/audit_throughput.py` ({what}): not run.", ""]
            continue
        lines += [f"{what}: {doc['audited']} of {doc['n']} memories audited in {doc['wall_s']} s "
                  f"by `{doc['auditor']}` (worker concurrency {doc['concurrency']}, "
                  f"{doc['llm_calls']} needed the LLM): **{doc['audits_per_s']} audits/s**; "
                  f"LLM audit latency p50 / p95 {doc['llm_latency_p50_s']} / "
                  f"{doc['llm_latency_p95_s']} s ([report]({_report_link(path)})).",
                  ""]  # fmt: skip
    return lines


def targets_lines(
    headline: dict[str, Any] | None,
    adv: dict[str, Any] | None,
    thr: dict[str, Any] | None,
    held_out: dict[str, Any] | None = None,
) -> list[str]:
    """The issue's targets against the headline run (v2 test split), the adversarial v2 run
    and the throughput benchmark; a missing document reads "not run"."""
    s = headline["summary"] if headline else {}
    measured: list[tuple[str, float | None, float, bool]] = [
        ("F1", _value(s.get("overall", {}).get("f1")), TARGETS["f1"], True),
        ("domain accuracy", _value(s.get("bias_type_accuracy")), TARGETS["domain"], True),
        ("benevolent recall", _value(s.get("recall_per_strategy", {}).get("benevolent")),
         TARGETS["benevolent"], True),
        ("FP rate, hard negatives", _value(s.get("false_positive_rate", {}).get("hard_negative")),
         TARGETS["fp_hard"], False),
        ("evasion, adversarial_memories_v2",
         adv["summary"]["by_attack"]["all"]["evasion_rate"] if adv else None,
         TARGETS["evasion"], False),
        ("evasion, adversarial_memories_v3 (held out)",
         held_out["summary"]["by_attack"]["all"]["evasion_rate"] if held_out else None,
         TARGETS["evasion"], False),
        ("audits/s sustained", thr["audits_per_s"] if thr else None, TARGETS["audits_per_s"], True),
    ]  # fmt: skip
    model, prompt, verdict, _ = HEADLINE
    lines = ["## Targets", "",
             f"Headline: {model}, {prompt}/{verdict}, full pipeline, `auditor_eval_v2` test split.",
             "", "| measure | target | measured | met |", "|---|---|---|---|"]  # fmt: skip
    for name, value, target, at_least in measured:
        sign = ">=" if at_least else "<="
        met = "not run" if value is None else (
            "yes" if (value >= target if at_least else value <= target) else
            f"no (by {abs(value - target):.2f})"
        )  # fmt: skip
        lines.append(f"| {name} | {sign} {target:g} | {_num(value)} | {met} |")
    return [*lines, ""]


def main() -> int:
    runs = load_runs()
    lines = [
        "# Auditor evaluation v1 vs v2 (issue 17), generated by benchmarks/perf/auditor_report.py",
        "",
        "Rerun: `python benchmarks/perf/auditor_report.py` (reads the committed results only).",
        "",
    ]
    lines += targets_lines(runs.get((*HEADLINE, "auditor_eval_v2")), _read(ADV_V2),
                           _read(THROUGHPUT), _read(ADV_V3))  # fmt: skip
    lines += ["## Auditor evaluation, test splits (95% intervals)", "", HEADER]
    for model in MODELS:
        for pipeline in (False, True):
            for dataset in ("auditor_eval_v1", "auditor_eval_v2"):
                doc = runs.get((model, "auditor_v3", "logprob", pipeline, dataset))
                what = "full pipeline" if pipeline else "LLM only"
                lines.append(row(f"{model}, {what}, `{dataset}` test", doc))
    for key, doc in sorted(runs.items()):
        if key[1] != "auditor_v3" or key[2] != "logprob":
            lines.append(row(f"{key[0]}, {key[1]}/{key[2]}{', pipeline' if key[3] else ''}, "
                             f"`{key[4]}` test", doc))  # fmt: skip
    lines += adversarial_lines()
    lines += throughput_lines()
    OUT.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(OUT.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
