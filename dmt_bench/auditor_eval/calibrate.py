"""Fit the log-prob auditor's Platt calibration from auditor-eval runs on train splits.

Input: report JSONs of ``dmt-bench auditor-eval --verdict logprob --no-calibration``
on *train* splits only (the function refuses any other split: nothing is fitted on
a test split). Each item's ``verdict.p_raw`` and label are the training pairs; the
entry ``<model>@<prompt>`` of ``data/auditor_calibration/<version>.json`` is
replaced. With ``--first-stage-oof`` (out-of-fold first-stage scores of the same
train items, ``first_stage_oof``) the fusion of the two judges
(``JudgeFusion``, ``<model>@<prompt>+<classifier>``) is fitted as well; with
``--domain-weight`` the LLM's share of the domain vote (grid 0, 0.1, ..., 1, against
the classifier head's domain distribution on the same items; the head has seen
those items in training, so the weight it leaves the LLM is, if anything, too low).
With ``--base`` the file starts from that shipped calibration (written under
``--version``), and ``--fusion-only`` adds the fusion without refitting the Platt entry
(its domain weight included). Usage::

    dmt-bench auditor-calibrate --model qwen2.5-1.5b \\
        --prompt auditor_v3 RUN.json [RUN.json ...] \\
        [--first-stage-oof OOF.json --classifier first_stage_classifier_v3]
    dmt-bench auditor-calibrate --model qwen2.5-1.5b \\
        --prompt auditor_v3 RUN.json --first-stage-oof OOF.json \\
        --classifier first_stage_classifier_v4 --fusion-only \\
        --base calibration_v2 --version calibration_v3 --out calibration_v3.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmt_proxy.audit.first_stage import CLASSIFIER_VERSION
from dmt_proxy.audit.fit import fit_fusion, fit_platt
from dmt_proxy.audit.logprob import (
    CALIBRATION_VERSION,
    Calibration,
    PlattScaling,
    calibration_key,
    load_calibration,
)
from dmt_proxy.audit.vote import DOMAIN_VOTE_LLM_WEIGHT, combine_domains
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


WEIGHT_GRID = tuple(round(0.1 * k, 1) for k in range(11))


def fit_domain_weight(
    llm: Sequence[dict[str, float]], head: Sequence[dict[str, float]], truth: Sequence[str]
) -> tuple[float, float]:
    """(weight, train accuracy): the largest LLM share of the domain vote whose accuracy on
    the training items is the highest of ``WEIGHT_GRID``."""
    best_w, best_acc = DOMAIN_VOTE_LLM_WEIGHT, -1.0
    for w in WEIGHT_GRID:
        hits = sum(combine_domains(a, None, b, llm_weight=w) == t
                   for a, b, t in zip(llm, head, truth, strict=True))  # fmt: skip
        acc = hits / len(truth) if truth else 0.0
        if acc >= best_acc:
            best_w, best_acc = w, acc
    return best_w, best_acc


def domain_vote_data(
    reports: Sequence[dict[str, Any]],
) -> tuple[list[dict[str, float]], list[dict[str, float]], list[str]]:
    """Biased train items with an LLM domain distribution: (LLM's, classifier head's, truth)."""
    from dmt_bench.auditor_eval.dataset import dataset_path, load_items
    from dmt_proxy.audit.first_stage import EmbeddingFirstStage
    from dmt_proxy.embedder import LocalEmbedder

    llm, texts, truth = [], [], []
    for doc in reports:
        by_id = {i.id: i for i in load_items(dataset_path(doc["run"]["dataset"]))}
        for entry in doc["items"]:
            probs = (entry.get("verdict") or {}).get("domain_probs")
            if entry["label"] == "biased" and probs and entry.get("domain"):
                llm.append(probs)
                texts.append(by_id[entry["id"]].text)
                truth.append(entry["domain"])
    head = [s.domain_probs for s in EmbeddingFirstStage(LocalEmbedder()).score_many(texts)]
    return llm, head, truth


def calibrate(model: str, prompt: str, reports: Sequence[dict[str, Any]]) -> PlattScaling:
    """The Platt fit of ``model@prompt`` on the reports' items."""
    raw, labels, trained_on = training_pairs(reports)
    return fit_platt(raw, labels, trained_on=trained_on)


def _base(base: str | None, out: Path) -> Calibration:
    """The calibration the written file starts from."""
    if base is not None:
        return load_calibration(base)
    if out.exists():
        return Calibration.model_validate(json.loads(out.read_text(encoding="utf-8")))
    return Calibration(version=CALIBRATION_VERSION)


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench auditor-calibrate``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench auditor-calibrate", description=__doc__.splitlines()[0]
    )
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
    parser.add_argument(
        "--domain-weight",
        action="store_true",
        help="also fit the LLM's share of the domain vote (embeds the items)",
    )
    parser.add_argument("--classifier", default=CLASSIFIER_VERSION,
                        help="the classifier those scores come from")  # fmt: skip
    parser.add_argument("--base", default=None,
                        help="shipped calibration to start from (default: --out if it exists)")  # fmt: skip
    parser.add_argument("--version", default=None, help="version written (default: the base's)")
    parser.add_argument("--description", default=None, help="description written")
    parser.add_argument("--fusion-only", action="store_true",
                        help="keep the base's Platt entry; fit only the fusion")  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fusion_only and args.first_stage_oof is None:
        parser.error("--fusion-only needs --first-stage-oof")
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in args.reports]
    key = calibration_key(args.model, args.prompt)
    current = _base(args.base, args.out)
    entry = current.entries.get(key) if args.fusion_only else None
    entry = entry or calibrate(args.model, args.prompt, reports)
    if args.domain_weight and not args.fusion_only:
        llm, head, truth = domain_vote_data(reports)
        if truth:
            weight, accuracy = fit_domain_weight(llm, head, truth)
            entry = entry.model_copy(update={"domain_weight": weight})
            print(f"domain vote: LLM weight {weight} (train accuracy {accuracy:.2f}, "
                  f"{len(truth)} items)", file=sys.stderr)  # fmt: skip
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
    if args.version:
        updated = updated.model_copy(update={"version": args.version})
    if args.description:
        updated = updated.model_copy(update={"description": args.description})
    args.out.write_text(json.dumps(updated.model_dump(), indent=1) + "\n", encoding="utf-8")
    print(f"{calibration_key(args.model, args.prompt)}: {entry.model_dump()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
