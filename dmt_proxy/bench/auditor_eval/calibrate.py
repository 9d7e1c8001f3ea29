"""Fit the log-prob auditor's Platt calibration from auditor-eval runs on train splits.

Input: report JSONs of ``dmt-bench auditor-eval --verdict logprob --no-calibration``
on *train* splits only (the function refuses any other split: nothing is fitted on
a test split). Each item's ``verdict.p_raw`` and label are the training pairs; the
entry ``<model>@<prompt>`` of ``data/auditor_calibration/<version>.json`` is
replaced. With ``--first-stage-oof`` (out-of-fold first-stage scores of the same
train items, ``first_stage_oof``) the fusion of the two judges
(``JudgeFusion``, ``<model>@<prompt>+<classifier>``) is fitted as well. Usage::

    python -m dmt_proxy.bench.auditor_eval.calibrate --model qwen2.5-1.5b \\
        --prompt auditor_v3 RUN.json [RUN.json ...] \\
        [--first-stage-oof OOF.json --classifier first_stage_classifier_v3]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmt_proxy.audit.first_stage import CLASSIFIER_VERSION
from dmt_proxy.audit.logprob import (
    CALIBRATION_VERSION,
    Calibration,
    PlattScaling,
    calibration_key,
    fit_fusion,
    fit_platt,
    load_calibration,
)
from dmt_proxy.errors import ConfigError
from dmt_proxy.resources import data_dir


def training_pairs(reports: Sequence[dict[str, Any]]) -> tuple[list[float], list[bool], str]:
    """(P_raw, biased) of every item with a log-prob verdict, and a ``trained_on`` label."""
    raw: list[float] = []
    labels: list[bool] = []
    sources = []
    for doc in reports:
        run = doc["run"]
        if run["split"] != "train":
            raise ConfigError(f"{run['dataset']}: calibration is fitted on train splits only, "
                              f"not {run['split']!r}")  # fmt: skip
        sources.append(f"{run['dataset']}/train")
        for item in doc["items"]:
            p = (item.get("verdict") or {}).get("p_raw")
            if p is not None:
                raw.append(float(p))
                labels.append(item["label"] == "biased")
    if not raw:
        raise ConfigError("no item with a log-prob verdict (p_raw) in the given reports")
    return raw, labels, "+".join(sorted(set(sources)))


def fusion_pairs(
    reports: Sequence[dict[str, Any]], oof: dict[str, float]
) -> tuple[list[float], list[float], list[bool]]:
    """(P_raw, out-of-fold first-stage score, biased) of every train item that has both."""
    training_pairs(reports)  # the same checks: train splits only, something to fit
    raw: list[float] = []
    first: list[float] = []
    labels: list[bool] = []
    for doc in reports:
        for item in doc["items"]:
            p = (item.get("verdict") or {}).get("p_raw")
            if p is not None and item["id"] in oof:
                raw.append(float(p))
                first.append(min(1.0, max(0.0, oof[item["id"]])))
                labels.append(item["label"] == "biased")
    if not raw:
        raise ConfigError("no train item has both a log-prob verdict and a first-stage score")
    return raw, first, labels


def calibrate(model: str, prompt: str, reports: Sequence[dict[str, Any]]) -> PlattScaling:
    """The Platt fit of ``model@prompt`` on the reports' items."""
    raw, labels, trained_on = training_pairs(reports)
    return fit_platt(raw, labels, trained_on=trained_on)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="model id, e.g. qwen2.5-1.5b")
    parser.add_argument("--prompt", required=True, help="auditor prompt version")
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument(
        "--out", type=Path, default=data_dir("auditor_calibration") / f"{CALIBRATION_VERSION}.json"
    )
    parser.add_argument(
        "--first-stage-oof",
        type=Path,
        default=None,
        help="out-of-fold first-stage scores of the train items (fits the fusion)",
    )
    parser.add_argument("--classifier", default=CLASSIFIER_VERSION,
                        help="the classifier those scores come from")  # fmt: skip
    args = parser.parse_args(argv)
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in args.reports]
    key = calibration_key(args.model, args.prompt)
    entry = calibrate(args.model, args.prompt, reports)
    current = load_calibration() if args.out.exists() else Calibration(version=CALIBRATION_VERSION)
    entries = {**current.entries, key: entry}
    fusions = dict(current.fusion)
    if args.first_stage_oof is not None:
        oof = json.loads(args.first_stage_oof.read_text(encoding="utf-8"))["scores"]
        raw, first, labels = fusion_pairs(reports, oof)
        fusion = fit_fusion(raw, first, labels, classifier=args.classifier,
                            trained_on=training_pairs(reports)[2])  # fmt: skip
        fusions[f"{key}+{args.classifier}"] = fusion
        print(f"fusion {key}+{args.classifier}: {fusion.model_dump()}", file=sys.stderr)
    updated = current.model_copy(update={"entries": dict(sorted(entries.items())),
                                         "fusion": dict(sorted(fusions.items()))})  # fmt: skip
    args.out.write_text(json.dumps(updated.model_dump(), indent=1) + "\n", encoding="utf-8")
    print(f"{calibration_key(args.model, args.prompt)}: {entry.model_dump()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
