"""Judge v2 against issue 37's targets, from committed run reports (no model call).

    dmt-bench judge-report RUN.json [RUN.json ...] --out benchmarks/results/judge_v2/eval/summary

Each ``RUN.json`` is an ``dmt-bench auditor-eval --pipeline --first-stage judge_v2`` report
(a labelled set's split). Counting is the auditor reports' one rule
(``first_stage_report.item_counts``: flagged = tagged, disputed or a manipulation finding at
the report's tau); added here:

* F1 of English and of non-English items, and their difference, each with a 95 % percentile
  bootstrap interval over items (2,000 resamples, seed 0);
* every kind's flagged share (Wilson 95 %);
* **speaker attribution** on exchange items (``biased_speaker``): right when an item with no
  biased speaker is not flagged, and a flagged item's tag names the speaker the set names;
* the LLM's share: items the trained judge did not decide alone.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.auditor_eval.first_stage_report import item_counts
from dmt_bench.auditor_eval.runner import ItemResult
from dmt_bench.stats import wilson_interval
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.policy import AuditPolicy

TARGETS = {"f1": 0.92, "hard_negative_fp": 0.08, "self_description_fp": 0.05,
           "benevolent_recall": 0.85, "domain_accuracy": 0.90, "f1_gap": 0.05,
           "speaker": 0.95}  # fmt: skip


def rows_of(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per item: label, kind, language, flagged, speaker, LLM call."""
    tau = doc["summary"]["tau"]
    rows = []
    for entry in doc["items"]:
        raw = entry.get("verdict")
        verdict = AuditVerdict.model_validate(raw) if raw else None
        item = EvalItem.model_validate(entry["item"])
        result = ItemResult(item=item, verdict=verdict, latency_s=entry["latency_s"],
                            error=entry.get("error"))  # fmt: skip
        pred = result.prediction(AuditPolicy(tau=tau))
        rows.append({
            "biased": item.biased, "kind": item.kind, "language": item.language or "en",
            "flagged": pred.flagged(tau), "speaker": verdict.speaker if verdict else None,
            "biased_speaker": entry["item"].get("biased_speaker"),
            "llm": verdict is not None and not verdict.decided_by_first_stage,
        })  # fmt: skip
    return rows


def f1_of(rows: list[dict[str, Any]]) -> float:
    tp = sum(r["biased"] and r["flagged"] for r in rows)
    fp = sum(not r["biased"] and r["flagged"] for r in rows)
    fn = sum(r["biased"] and not r["flagged"] for r in rows)
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def boot(rows: list[dict[str, Any]], stat: Any, seed: int = 0) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    values = [stat([rows[i] for i in rng.integers(0, len(rows), len(rows))]) for _ in range(2000)]
    low, high = np.percentile(values, [2.5, 97.5])
    return round(float(low), 3), round(float(high), 3)


def gap(rows: list[dict[str, Any]]) -> float:
    en = [r for r in rows if r["language"] == "en"]
    other = [r for r in rows if r["language"] != "en"]
    return f1_of(en) - f1_of(other) if en and other else 0.0


def measure(doc: dict[str, Any]) -> dict[str, Any]:
    """Every measure of one run, with counts and intervals."""
    rows = rows_of(doc)
    counts = item_counts(doc)
    en = [r for r in rows if r["language"] == "en"]
    other = [r for r in rows if r["language"] != "en"]
    exchanges = [r for r in rows if r["biased_speaker"] is not None]
    right = sum((not r["flagged"]) if r["biased_speaker"] == "none"
                else (r["flagged"] and r["speaker"] == r["biased_speaker"]) for r in exchanges)  # fmt: skip
    kinds: dict[str, list[int]] = {}
    for r in rows:
        kinds.setdefault(r["kind"], [0, 0])
        kinds[r["kind"]][0] += r["flagged"]
        kinds[r["kind"]][1] += 1
    return {
        "n": len(rows), "f1": round(f1_of(rows), 3), "f1_ci": boot(rows, f1_of),
        "f1_en": round(f1_of(en), 3), "f1_non_en": round(f1_of(other), 3),
        "n_en": len(en), "n_non_en": len(other),
        "f1_gap": round(gap(rows), 3), "f1_gap_ci": boot(rows, gap),
        **{m: {"k": k, "n": n} for m, (k, n) in counts.items() if m not in ("tp", "fp", "fn")},
        "speaker": {"k": right, "n": len(exchanges)},
        "llm_share": {"k": sum(r["llm"] for r in rows), "n": len(rows)},
        "kinds": {k: {"k": v[0], "n": v[1]} for k, v in sorted(kinds.items())},
    }  # fmt: skip


def rate(c: dict[str, int]) -> str:
    if not c["n"]:
        return "n/a"
    ci = wilson_interval(c["k"], c["n"])
    return f"{c['k'] / c['n']:.2f} [{ci.low:.2f}, {ci.high:.2f}] ({c['k']}/{c['n']})"


def markdown(runs: dict[str, dict[str, Any]]) -> list[str]:
    names = list(runs)
    lines = ["| measure | target | " + " | ".join(names) + " |",
             "|---|---|" + "---|" * len(names)]  # fmt: skip
    lines.append(
        "| F1 [95 % bootstrap] | >= 0.92 | "
        + " | ".join(
            f"{m['f1']:.3f} [{m['f1_ci'][0]:.3f}, {m['f1_ci'][1]:.3f}]" for m in runs.values()
        )
        + " |"
    )
    lines.append("| F1 en / non-en (n) | | " + " | ".join(
        f"{m['f1_en']:.3f} ({m['n_en']}) / {m['f1_non_en']:.3f} ({m['n_non_en']})"
        for m in runs.values()) + " |")  # fmt: skip
    lines.append("| F1 gap en - non-en | <= 0.05 | " + " | ".join(
        f"{m['f1_gap']:+.3f} [{m['f1_gap_ci'][0]:+.3f}, {m['f1_gap_ci'][1]:+.3f}]"
        for m in runs.values()) + " |")  # fmt: skip
    for key, label, target in (
        ("hard_negative_fp", "hard-negative FP", "<= 0.08"),
        ("self_description_fp", "self-description FP", "<= 0.05"),
        ("benevolent_recall", "benevolent recall", ">= 0.85"),
        ("domain_accuracy", "domain accuracy (true positives)", ">= 0.90"),
        ("speaker", "speaker attributed right (exchanges)", ">= 0.95"),
        ("llm_share", "LLM judged (share of items)", ""),
    ):
        lines.append(f"| {label} | {target} | " + " | ".join(rate(m[key]) for m in runs.values())
                     + " |")  # fmt: skip
    lines += ["", "Flagged share by kind:", "", "| kind | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]  # fmt: skip
    kinds = sorted({k for m in runs.values() for k in m["kinds"]})
    for kind in kinds:
        cells = [rate(m["kinds"][kind]) if kind in m["kinds"] else "" for m in runs.values()]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return lines


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The report command's options (``dmt-bench judge-report`` and ``python -m``)."""
    parser.add_argument("runs", nargs="+", type=Path, help="auditor-eval report JSONs")
    parser.add_argument("--out", type=Path, required=True, help="stem: writes .json and .md")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Judge v2 against issue 37's targets.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Measure every run and write the summary."""
    runs: dict[str, dict[str, Any]] = {}
    for path in args.runs:
        doc = json.loads(path.read_text(encoding="utf-8"))
        runs[f"{doc['run']['dataset']} {doc['run']['split']}"] = measure(doc)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    args.out.with_suffix(".md").write_text("\n".join(markdown(runs)) + "\n", encoding="utf-8")
    print("\n".join(markdown(runs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
