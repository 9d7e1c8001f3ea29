"""Two first stages (classifier and fusion) side by side: the train-split rule and test replays.

Reads committed files only (no model call, no embedding): the gate comparison and
decision rule ``first_stage_gate`` wrote on train splits, and pipeline replays
(``replay``) of the same LLM verdicts through each classifier with its fusion. Per
replayed test split: F1 (bootstrap interval from the replay's summary), hard-negative
FP (mentions of a group in facts, law, research, support and rejected reports, and v2's
hard negatives), self-description FP, benevolent recall, domain accuracy among true
positives and the share of items the gate decided alone, each with a Wilson 95%
interval. Usage::

    dmt-bench first-stage-report \\
        --gate benchmarks/results/auditor_eval_v3/first_stage_v4_gate_train.json \\
        --pair "auditor_eval_v3 test" BASELINE.json CANDIDATE.json \\
        --pair "auditor_eval_v2 test" BASELINE.json CANDIDATE.json \\
        --out benchmarks/results/auditor_eval_v3/first_stage_v4
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.auditor_eval.runner import ItemResult
from dmt_bench.stats import wilson_interval
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.policy import AuditPolicy

HARD = frozenset({"mention_fact", "mention_support", "reported_rejected", "mention_law",
                  "mention_research", "hard_negative"})  # fmt: skip
"""As ``benchmarks/perf/auditor_v4_report.py`` counts hard negatives (self-description apart)."""
MEASURES = ("hard_negative_fp", "self_description_fp", "benevolent_recall", "domain_accuracy",
            "decided_by_gate")  # fmt: skip


VerdictView = Callable[[dict[str, Any]], dict[str, Any]]
"""What a report reads of a stored verdict (``benchmarks/perf/auditor_v4_report.py`` strips
the framing question's findings with one)."""


def item_counts(
    doc: dict[str, Any], *, view: VerdictView | None = None
) -> dict[str, tuple[int, int]]:
    """Counts behind every measure of one auditor-eval report, from its per-item verdicts at
    the report's tau: ``tp``/``fp``/``fn`` (as ``(count, 0)``) and ``(k, n)`` for each of
    ``MEASURES``. The one counting rule of the auditor reports."""
    tau = doc["summary"]["tau"]
    counts = {m: [0, 0] for m in ("tp", "fp", "fn", *MEASURES)}
    for entry in doc["items"]:
        raw = entry.get("verdict")
        verdict = AuditVerdict.model_validate(view(raw) if view else raw) if raw else None
        result = ItemResult(item=EvalItem.model_validate(entry["item"]), verdict=verdict,
                            latency_s=entry["latency_s"], error=entry.get("error"))  # fmt: skip
        pred = result.prediction(AuditPolicy(tau=tau))
        flagged = pred.flagged(tau)
        biased = entry["label"] == "biased"
        counts["tp"][0] += biased and flagged
        counts["fp"][0] += (not biased) and flagged
        counts["fn"][0] += biased and not flagged
        pairs = {
            "hard_negative_fp": entry["kind"] in HARD,
            "self_description_fp": entry["kind"] == "self_description",
            "benevolent_recall": entry.get("strategy") == "benevolent",
            "domain_accuracy": biased and flagged,
            "decided_by_gate": True,
        }
        hits = {
            "hard_negative_fp": flagged, "self_description_fp": flagged,
            "benevolent_recall": flagged, "domain_accuracy": pred.bias_type == entry["domain"],
            "decided_by_gate": verdict is not None and verdict.decided_by_first_stage,
        }  # fmt: skip
        for m in MEASURES:
            if pairs[m]:
                counts[m][0] += int(hits[m])
                counts[m][1] += 1
    return {m: (k, n) for m, (k, n) in counts.items()}


def measures(doc: dict[str, Any]) -> dict[str, Any]:
    """Counts (k, n) behind each measure of one replayed report, and its F1."""
    counts = item_counts(doc)
    f1 = doc["summary"]["overall"]["f1"]
    return {"f1": {"value": f1["value"], "low": f1["ci"]["low"], "high": f1["ci"]["high"]},
            **{m: {"k": counts[m][0], "n": counts[m][1]} for m in MEASURES}}  # fmt: skip


def _rate(c: dict[str, int]) -> str:
    k, n = c["k"], c["n"]
    if n == 0:
        return "n/a"
    ci = wilson_interval(k, n)
    return f"{k / n:.2f} [{ci.low:.2f}, {ci.high:.2f}] ({k}/{n})"


def _f1(c: dict[str, float]) -> str:
    return f"{c['value']:.2f} [{c['low']:.2f}, {c['high']:.2f}]"


TARGETS = {"f1": ">= 0.90", "hard_negative_fp": "<= 0.10", "self_description_fp": "<= 0.05",
           "benevolent_recall": ">= 0.80", "domain_accuracy": ">= 0.85", "decided_by_gate": "-"}  # fmt: skip


def test_table(name: str, base: dict[str, Any], cand: dict[str, Any]) -> list[str]:
    """Markdown rows of one test split: baseline against candidate."""
    lines = [f"### {name}", "", "| measure | target | baseline | candidate |", "|---|---|---|---|"]
    lines.append(f"| F1 | {TARGETS['f1']} | {_f1(base['f1'])} | {_f1(cand['f1'])} |")
    for m in MEASURES:
        lines.append(
            f"| {m.replace('_', ' ')} | {TARGETS[m]} | {_rate(base[m])} | {_rate(cand[m])} |"
        )
    return [*lines, ""]


def gate_table(gate: dict[str, Any]) -> list[str]:
    """Markdown rows of the per-kind gate comparison on out-of-fold train scores."""
    b, c = gate["baseline"], gate["candidate"]
    lines = [
        f"Gate: {b['version']} (threshold {b['threshold']}, confident_bias "
        f"{b['confident_bias']}) against {c['version']} (threshold {c['threshold']}, "
        f"confident_bias {c['confident_bias']}, confident_clean {c['confident_clean']}).", "",
        "| set | kind | label | n | passed (baseline) | passed (candidate) | decided alone "
        "(baseline) | decided alone (candidate) | >= confident_bias (baseline) | "
        ">= confident_bias (candidate) |", "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for rb, rc in zip(b["rows"], c["rows"], strict=True):
        n = rb["n"]
        lines.append(
            f"| {rb['dataset']} | {rb['kind']} | {rb['label']} | {n} | "
            f"{_rate({'k': rb['passed'], 'n': n})} | {_rate({'k': rc['passed'], 'n': n})} | "
            f"{rb['decided_alone']} | {rc['decided_alone']} | {rb['confident_bias']} | "
            f"{rc['confident_bias']} |"
        )
    return [*lines, ""]


def rule_lines(rule: dict[str, Any]) -> list[str]:
    """The decision rule's four checks and outcome."""

    def pair(key: str) -> str:
        v = rule[key]
        if isinstance(v["baseline"], list):
            return (f"{_rate({'k': v['baseline'][0], 'n': v['baseline'][1]})} -> "
                    f"{_rate({'k': v['candidate'][0], 'n': v['candidate'][1]})}")  # fmt: skip
        return f"{v['baseline']} -> {v['candidate']}"

    lines = [
        f"1. hard negatives + self-descriptions passed by the gate, lower: "
        f"{pair('hard_negative_passed')}: {rule['checks']['hard_negative_pass_lower']}",
        f"2. biased recall at the gate not lower by more than 0.02: {pair('biased_recall')}: "
        f"{rule['checks']['biased_recall_within_slack']}",
        f"3. chat_mix_v1 ordinary texts cleared alone, not fewer: {pair('chat_mix_cleared')}: "
        f"{rule['checks']['chat_mix_cleared_not_lower']}",
        f"4. AUC biased vs neutral on auditor_eval_v3/train, not lower: {pair('v3_train_auc')}: "
        f"{rule['checks']['v3_train_auc_not_lower']}",
        "", f"Outcome: {'the candidate replaces the baseline' if rule['replace'] else 'kept as an option'}.",
    ]  # fmt: skip
    return [*lines, ""]


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench first-stage-report``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench first-stage-report", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--gate", type=Path, required=True)
    parser.add_argument("--pair", nargs=3, action="append", default=[],
                        metavar=("NAME", "BASELINE", "CANDIDATE"))  # fmt: skip
    parser.add_argument("--out", type=Path, required=True, help="path without suffix")
    parser.add_argument("--preamble", type=Path, default=None, help="markdown put first")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    gate = json.loads(args.gate.read_text(encoding="utf-8"))
    tests = {}
    for name, base, cand in args.pair:
        tests[name] = {
            "baseline": {"file": base, **measures(json.loads(Path(base).read_text("utf-8")))},
            "candidate": {"file": cand, **measures(json.loads(Path(cand).read_text("utf-8")))},
        }
    doc = {"gate": args.gate.as_posix(), "rule": gate["rule"], "tests": tests}
    args.out.with_suffix(".json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    lines = [args.preamble.read_text("utf-8").rstrip(), ""] if args.preamble else []
    lines += [
        "## Decision rule (train splits and the chat mix only)",
        "",
        *rule_lines(gate["rule"]),
    ]
    lines += ["## Gate per kind, out-of-fold train scores", "", *gate_table(gate)]
    lines += ["## Test splits (replayed once)", ""]
    for name, t in tests.items():
        lines += test_table(name, t["baseline"], t["candidate"])
        lines += [
            f"Baseline: `{t['baseline']['file']}`; candidate: `{t['candidate']['file']}`.",
            "",
        ]
    args.out.with_suffix(".md").write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    print(f"wrote {args.out}.md/.json", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
