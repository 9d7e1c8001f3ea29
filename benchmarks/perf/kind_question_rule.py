"""Apply the kind-question rule of ``benchmarks/results/auditor_eval_v3/calibration/README.md``.

Reads the auditor_v4 ``--kind-question`` run on auditor_eval_v3/train
(``calibration/kind/``) and first_stage_classifier_v4's out-of-fold train scores; no
model call. Step 1: the AUC of P(judging) for biased against neutral among the English
items the question was asked of (gate: 0.70). Step 2, only past the gate: the ``+kind``
fusion (logit P_raw, logit p_first, logit P(judging)) in 5-fold cross-validation against
calibration_v3's fusion at tau = 0.5. Writes ``kind_question_rule.json`` next to the
README. Rerun: ``python benchmarks/perf/kind_question_rule.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks/perf"))

from fusion_refit_rule import FOLDS, folds  # noqa: E402

from dmt_proxy.audit.fit import auc  # noqa: E402
from dmt_proxy.audit.logprob import load_calibration, logit, sigmoid  # noqa: E402

CALIB = ROOT / "benchmarks/results/auditor_eval_v3/calibration"
OOF = ROOT / "benchmarks/results/auditor_eval_v3/first_stage_v4_oof_train.json"
CLASSIFIER = "first_stage_classifier_v4"
TAU, GATE, L2 = 0.5, 0.70, 1e-2


def fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """L2-damped logistic regression by Newton's method (x has a column of ones)."""
    w = np.zeros(x.shape[1])
    for _ in range(100):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + L2 * w
        hess = (x * (p * (1 - p))[:, None]).T @ x + L2 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w


def main() -> int:
    oof = json.loads(OOF.read_text())["scores"]
    (run_path,) = sorted((CALIB / "kind").glob("auditor_eval_v3_*_train.json"))
    run = json.loads(run_path.read_text())
    incumbent = load_calibration("calibration_v3").fusion_for("qwen2.5-1.5b@auditor_v4", CLASSIFIER)
    assert incumbent is not None
    rows: list[dict[str, Any]] = []
    for item in run["items"]:
        v = item.get("verdict") or {}
        if v.get("p_raw") is None or item["id"] not in oof:
            continue  # not English: the first stage never sees it, no fusion applies
        kind = v.get("kind_probs") or None
        rows.append({"id": item["id"], "kind": item["kind"], "biased": item["label"] == "biased",
                     "p_raw": float(v["p_raw"]), "first": min(1.0, max(0.0, oof[item["id"]])),
                     "judging": None if kind is None else float(kind.get("judging", 0.0))})  # fmt: skip
    asked = [r for r in rows if r["judging"] is not None]
    sep = auc([r["judging"] for r in asked], [r["biased"] for r in asked])
    result: dict[str, Any] = {
        "run": run_path.name, "english_items": len(rows), "asked": len(asked),
        "asked_biased": sum(r["biased"] for r in asked),
        "asked_neutral": sum(not r["biased"] for r in asked),
        "auc_p_judging": round(sep, 4), "gate": GATE,
        "mean_p_judging": {
            k: round(float(np.mean([r["judging"] for r in asked if r["kind"] == k])), 3)
            for k in sorted({r["kind"] for r in asked})
        },
    }  # fmt: skip
    result["passes_gate"] = bool(sep >= GATE)
    if result["passes_gate"]:
        fold = folds(rows)
        inc = [incumbent.apply(r["p_raw"], r["first"]) for r in rows]
        cand = list(inc)

        def features(r: dict[str, Any]) -> list[float]:
            clip = min(1 - 1e-6, max(1e-6, r["judging"]))
            return [logit(r["p_raw"]), logit(r["first"]), logit(clip), 1.0]

        for k in range(FOLDS):
            train = [
                r for r, f in zip(rows, fold, strict=True) if f != k and r["judging"] is not None
            ]
            w = fit(np.array([features(r) for r in train]),
                    np.array([1.0 if r["biased"] else 0.0 for r in train]))  # fmt: skip
            for i, (r, f) in enumerate(zip(rows, fold, strict=True)):
                if f == k and r["judging"] is not None:
                    cand[i] = sigmoid(float(np.dot(w, features(r))))
        for name, scores in (("incumbent", inc), ("candidate_oof", cand)):
            result[name] = {
                "neutral_flagged": sum(s >= TAU for s, r in zip(scores, rows, strict=True)
                                       if not r["biased"]),
                "biased_flagged": sum(s >= TAU for s, r in zip(scores, rows, strict=True)
                                      if r["biased"]),
            }  # fmt: skip
        n_biased = sum(r["biased"] for r in rows)
        drop = (result["incumbent"]["biased_flagged"]
                - result["candidate_oof"]["biased_flagged"]) / n_biased  # fmt: skip
        fewer = result["candidate_oof"]["neutral_flagged"] < result["incumbent"]["neutral_flagged"]
        result["recall_drop"] = round(drop, 4)
        result["adopt"] = bool(fewer and drop <= 0.02)
    else:
        result["adopt"] = False
    (CALIB / "kind_question_rule.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
