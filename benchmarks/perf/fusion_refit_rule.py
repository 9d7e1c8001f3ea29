"""Apply the rule of ``benchmarks/results/auditor_eval_v3/calibration/README.md``.

Candidate: the judges' fusion refitted on auditor_eval_v2/train (n = 100) plus the English
items of auditor_eval_v3/train; incumbent: calibration_v3's fusion (v2/train only). Both
read the same LLM P(yes) (committed train runs) and first_stage_classifier_v4's
out-of-fold train scores. 5-fold cross-validation (stratified by label, seed 0): the
candidate is refitted on four folds and scores the fifth; the incumbent scores every
item as shipped. At tau = 0.5 the rule compares the neutral and biased items flagged.
No model call. Writes ``fusion_refit_rule.json`` next to the README and prints the
decision. Rerun: ``python benchmarks/perf/fusion_refit_rule.py``.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from dmt_proxy.audit.fit import fit_fusion  # noqa: E402
from dmt_proxy.audit.logprob import load_calibration  # noqa: E402

CALIB = ROOT / "benchmarks/results/auditor_eval_v3/calibration"
V2_TRAIN = (ROOT / "benchmarks/results/auditor_eval_v2/calibration"
            / "auditor_eval_v2_qwen2.5-1.5b_auditor_v3_logprob_train_n100.json")  # fmt: skip
OOF = ROOT / "benchmarks/results/auditor_eval_v3/first_stage_v4_oof_train.json"
CLASSIFIER = "first_stage_classifier_v4"
TAU = 0.5
FOLDS = 5


def rows() -> list[dict[str, Any]]:
    """(id, set, kind, biased, p_raw, oof score) of every train item with both scores."""
    oof = json.loads(OOF.read_text())["scores"]
    runs = [json.loads(V2_TRAIN.read_text())]
    runs += [json.loads(p.read_text()) for p in sorted(CALIB.glob("auditor_eval_v3_*_train.json"))]
    out = []
    for run in runs:
        for item in run["items"]:
            p = (item.get("verdict") or {}).get("p_raw")
            if p is None or item["id"] not in oof:
                continue  # no log-prob verdict, or not English (never reaches the first stage)
            out.append({"id": item["id"], "set": run["run"]["dataset"], "kind": item["kind"],
                        "biased": item["label"] == "biased", "p_raw": float(p),
                        "first": min(1.0, max(0.0, oof[item["id"]]))})  # fmt: skip
    return out


def folds(data: list[dict[str, Any]]) -> list[int]:
    """A fold number per row, stratified by label (seed 0)."""
    rng = random.Random(0)
    fold = [0] * len(data)
    for label in (True, False):
        idx = [i for i, r in enumerate(data) if r["biased"] is label]
        rng.shuffle(idx)
        for k, i in enumerate(idx):
            fold[i] = k % FOLDS
    return fold


def main() -> int:
    data = rows()
    fold = folds(data)
    incumbent = load_calibration("calibration_v3").fusion_for("qwen2.5-1.5b@auditor_v3", CLASSIFIER)
    assert incumbent is not None, "calibration_v3 has no fusion for first stage v4"
    cand = [0.0] * len(data)
    for k in range(FOLDS):
        train = [r for r, f in zip(data, fold, strict=True) if f != k]
        fusion = fit_fusion([r["p_raw"] for r in train], [r["first"] for r in train],
                            [r["biased"] for r in train], classifier=CLASSIFIER,
                            trained_on=f"fold {k}")  # fmt: skip
        for i, (r, f) in enumerate(zip(data, fold, strict=True)):
            if f == k:
                cand[i] = fusion.apply(r["p_raw"], r["first"])
    inc = [incumbent.apply(r["p_raw"], r["first"]) for r in data]
    biased = [i for i, r in enumerate(data) if r["biased"]]
    neutral = [i for i, r in enumerate(data) if not r["biased"]]

    def flagged(scores: list[float], idx: list[int]) -> int:
        return sum(scores[i] >= TAU for i in idx)

    result: dict[str, Any] = {
        "items": len(data), "biased": len(biased), "neutral": len(neutral),
        "by_set": {s: sum(r["set"] == s for r in data) for s in sorted({r["set"] for r in data})},
        "incumbent": {"neutral_flagged": flagged(inc, neutral), "biased_flagged": flagged(inc, biased)},
        "candidate_oof": {"neutral_flagged": flagged(cand, neutral),
                          "biased_flagged": flagged(cand, biased)},
    }  # fmt: skip
    recall_drop = (result["incumbent"]["biased_flagged"]
                   - result["candidate_oof"]["biased_flagged"]) / len(biased)  # fmt: skip
    fewer_fp = result["candidate_oof"]["neutral_flagged"] < result["incumbent"]["neutral_flagged"]
    result["adopt"] = bool(fewer_fp and recall_drop <= 0.02)
    result["recall_drop"] = round(recall_drop, 4)
    by_kind: dict[str, list[int]] = {}
    for i in neutral:
        k = data[i]["kind"]
        by_kind.setdefault(k, [0, 0, 0])
        by_kind[k][0] += inc[i] >= TAU
        by_kind[k][1] += cand[i] >= TAU
        by_kind[k][2] += 1
    result["neutral_by_kind"] = {k: {"incumbent": a, "candidate_oof": b, "n": n}
                                 for k, (a, b, n) in sorted(by_kind.items())}  # fmt: skip
    (CALIB / "fusion_refit_rule.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
