"""The tools that compare two first stages: the gate rule, the report's counts, and a
calibration that adds a fusion to a shipped one (hand-computed cases, no model)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dmt_bench.auditor_eval import calibrate
from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.auditor_eval.first_stage_gate import GateRow, decision_rule, gate_rows
from dmt_bench.auditor_eval.first_stage_report import measures
from dmt_bench.auditor_eval.first_stage_train import train_items
from dmt_proxy.audit.first_stage import load_classifier
from dmt_proxy.audit.logprob import load_calibration
from dmt_proxy.audit.schema import FIRST_STAGE_LABEL


def _row(kind: str, label: str, n: int, passed: int) -> GateRow:
    return GateRow(dataset="v3", kind=kind, label=label, n=n, passed=passed,
                   decided_alone=n - passed, confident_bias=0)  # fmt: skip


def test_decision_rule_needs_all_four_checks() -> None:
    base = [_row("mention_fact", "neutral", 10, 8), _row("judgment", "biased", 50, 50)]
    better = [_row("mention_fact", "neutral", 10, 6), _row("judgment", "biased", 50, 49)]
    rule = decision_rule(base, better, 0.80, 0.85, (80, 120), (90, 120))
    assert rule["replace"] and all(rule["checks"].values())
    # recall 49/50 -> 48/50 is 0.04 lower: more than the 0.02 slack
    worse = [_row("mention_fact", "neutral", 10, 6), _row("judgment", "biased", 50, 48)]
    rule = decision_rule(base, worse, 0.80, 0.85, (80, 120), (90, 120))
    assert not rule["replace"] and not rule["checks"]["biased_recall_within_slack"]
    rule = decision_rule(base, better, 0.80, 0.85, (80, 120), (79, 120))
    assert not rule["replace"] and not rule["checks"]["chat_mix_cleared_not_lower"]


def test_gate_rows_count_passed_alone_and_confident_items() -> None:
    model = load_classifier("first_stage_classifier_v3")  # threshold 0.5, confident_bias 0.97
    items = [EvalItem(id=f"v3-train-age-0{k}", text="t", label="neutral", kind="mention_fact",
                      split="train", domain="age") for k in range(3)]  # fmt: skip
    scores = {"v3-train-age-00": 0.1, "v3-train-age-01": 0.5, "v3-train-age-02": 0.99}
    (row,) = gate_rows(items, scores, model)
    assert (row.n, row.passed, row.decided_alone, row.confident_bias) == (3, 2, 1, 1)


def test_train_items_are_the_english_train_items() -> None:
    items = train_items(["auditor_eval_v3"])
    assert items and all(i.split == "train" and i.language == "en" for i in items)


def _entry(kind: str, label: str, flagged: bool, *, gate: bool = False,
           bias_type: str = "age", strategy: str | None = None) -> dict[str, Any]:  # fmt: skip
    item = {"id": f"{kind}-{label}-{flagged}-{gate}-{bias_type}", "text": "t", "label": label,
            "kind": kind, "split": "test", "domain": "age", "strategy": strategy}  # fmt: skip
    verdict: dict[str, Any] = {"bias_detected": flagged, "score": 0.9 if flagged else 0.1,
                               "auditor": FIRST_STAGE_LABEL if gate else "m@p/logprob"}  # fmt: skip
    if flagged:
        verdict["bias_type"] = bias_type
    return {"id": item["id"], "label": label, "kind": kind, "domain": "age", "strategy": strategy,
            "latency_s": 0.0, "item": item, "verdict": verdict}  # fmt: skip


def test_report_measures_count_each_target() -> None:
    doc = {
        "summary": {"tau": 0.5, "overall": {"f1": {"value": 0.5, "ci": {"low": 0.1, "high": 0.9}}}},
        "items": [
            _entry("mention_fact", "neutral", True), _entry("mention_law", "neutral", False),
            _entry("self_description", "neutral", False, gate=True),
            _entry("benevolent", "biased", True, strategy="benevolent"),
            _entry("judgment", "biased", True, bias_type="race", strategy="treatment"),
            _entry("judgment", "biased", False, strategy="treatment"),
        ],
    }  # fmt: skip
    m = measures(doc)
    assert (m["hard_negative_fp"]["k"], m["hard_negative_fp"]["n"]) == (1, 2)
    assert (m["self_description_fp"]["k"], m["self_description_fp"]["n"]) == (0, 1)
    assert (m["benevolent_recall"]["k"], m["benevolent_recall"]["n"]) == (1, 1)
    assert (m["domain_accuracy"]["k"], m["domain_accuracy"]["n"]) == (1, 2)
    assert (m["decided_by_gate"]["k"], m["decided_by_gate"]["n"]) == (1, 6)
    assert m["f1"] == {"value": 0.5, "low": 0.1, "high": 0.9}


def test_fusion_only_adds_a_fusion_to_a_copy_of_a_shipped_calibration(tmp_path: Path) -> None:
    items = []
    for k in range(20):
        biased = k % 2 == 0
        items.append({"id": f"i{k}", "label": "biased" if biased else "neutral",
                      "verdict": {"p_raw": 0.8 - 0.02 * k if biased else 0.3 + 0.02 * k}})  # fmt: skip
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"run": {"dataset": "auditor_eval_v2", "split": "train"},
                               "items": items}))  # fmt: skip
    oof = tmp_path / "oof.json"
    oof.write_text(json.dumps({"scores": {f"i{k}": 0.9 if k % 3 else 0.2 for k in range(20)}}))
    out = tmp_path / "calibration_x.json"
    args = ["--model", "qwen2.5-1.5b", "--prompt", "auditor_v3", str(run),
            "--first-stage-oof", str(oof), "--classifier", "clf_x", "--fusion-only",
            "--base", "calibration_v2", "--version", "calibration_x", "--out", str(out)]  # fmt: skip
    assert calibrate.main(args) == 0
    written = load_calibration(str(out))
    base = load_calibration("calibration_v2")
    assert written.version == "calibration_x" and written.entries == base.entries
    assert set(written.fusion) == {*base.fusion, "qwen2.5-1.5b@auditor_v3+clf_x"}
    fusion = written.fusion["qwen2.5-1.5b@auditor_v3+clf_x"]
    assert (
        fusion.n == 20 and fusion.positives == 10 and fusion.trained_on == "auditor_eval_v2/train"
    )
