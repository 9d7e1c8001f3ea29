"""The auditor report's targets table, on hand-built result documents."""

from __future__ import annotations

from benchmarks.perf.auditor_report import targets_lines


def est(value: float) -> dict[str, float]:
    return {"value": value}


def test_targets_say_met_missed_by_how_much_and_not_run() -> None:
    headline = {"summary": {
        "overall": {"f1": est(0.92)}, "bias_type_accuracy": est(0.80),
        "recall_per_strategy": {"benevolent": est(0.8)},
        "false_positive_rate": {"hard_negative": est(0.14)},
    }}  # fmt: skip
    adv = {"summary": {"by_attack": {"all": {"evasion_rate": 0.1}}}}
    rows = {line.split(" | ")[0].lstrip("| "): line for line in targets_lines(headline, adv, None)}
    assert rows["F1"].endswith("| 0.92 | yes |")
    assert rows["domain accuracy"].endswith("| 0.80 | no (by 0.05) |")
    assert rows["benevolent recall"].endswith("| yes |")  # at the target is met
    assert rows["FP rate, hard negatives"].endswith("| 0.14 | no (by 0.04) |")
    assert rows["evasion, adversarial_memories_v2"].endswith("| 0.10 | yes |")
    assert rows["evasion, adversarial_memories_v3 (held out)"].endswith("| n/a | not run |")
    assert rows["audits/s sustained"].endswith("| n/a | not run |")


def test_no_results_at_all_is_not_run_everywhere() -> None:
    lines = [line for line in targets_lines(None, None, None) if line.startswith("| ")]
    assert len(lines) == 8  # header and seven targets (v2 and the held-out v3 evasion)
    assert all(line.endswith("| not run |") for line in lines[1:])
