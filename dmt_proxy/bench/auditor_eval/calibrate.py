"""Fit the log-prob auditor's Platt calibration from auditor-eval runs on train splits.

Input: report JSONs of ``dmt-bench auditor-eval --verdict logprob --no-calibration``
on *train* splits only (the function refuses any other split: nothing is fitted on
a test split). Each item's ``verdict.p_raw`` and label are the training pairs; the
entry ``<model>@<prompt>`` of ``data/auditor_calibration/<version>.json`` is
replaced. Usage::

    python -m dmt_proxy.bench.auditor_eval.calibrate --model qwen2.5-1.5b \\
        --prompt auditor_v3 RUN.json [RUN.json ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmt_proxy.audit.logprob import (
    CALIBRATION_VERSION,
    Calibration,
    PlattScaling,
    calibration_key,
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
    args = parser.parse_args(argv)
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in args.reports]
    entry = calibrate(args.model, args.prompt, reports)
    current = load_calibration() if args.out.exists() else Calibration(version=CALIBRATION_VERSION)
    entries = {**current.entries, calibration_key(args.model, args.prompt): entry}
    updated = current.model_copy(update={"entries": dict(sorted(entries.items()))})
    args.out.write_text(json.dumps(updated.model_dump(), indent=1) + "\n", encoding="utf-8")
    print(f"{calibration_key(args.model, args.prompt)}: {entry.model_dump()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
