"""Out-of-fold first-stage scores of train items (for fitting anything on top of them).

A score the classifier gives an item it was trained on is over-confident; fitting a
calibration or a fusion on such scores would trust the classifier too much. This
writes, for every English train item of the given sets, the score of a classifier fitted
with the same recipe on the other folds (5-fold by item, as ``first_stage_train``'s
confidence levels). Usage::

    dmt-bench first-stage-oof \\
        --datasets auditor_eval_v1 auditor_eval_v2 --out first_stage_v3_oof_train.json
    dmt-bench first-stage-oof --l2 1e-4 \\
        --datasets auditor_eval_v1 auditor_eval_v2 auditor_eval_v3 \\
        --out first_stage_v4_oof_train.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import yaml

from dmt_bench.auditor_eval.first_stage_train import (
    L2,
    Pieces,
    out_of_fold_scores,
    train_items,
)
from dmt_proxy.resources import data_dir


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench first-stage-oof``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench first-stage-oof", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--datasets", nargs="+", default=["auditor_eval_v1", "auditor_eval_v2"])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--l2", type=float, default=L2, help=f"bias head's L2 (default {L2})")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dmt_proxy.embedder import LocalEmbedder

    items = train_items(args.datasets)
    narratives = yaml.safe_load(
        (data_dir("auditor_eval") / "narratives_v1.yaml").read_text("utf-8")
    )
    pieces = Pieces(items, narratives)
    vectors = np.asarray(LocalEmbedder().embed(pieces.texts), dtype=np.float64)
    scores = out_of_fold_scores(vectors, items, narratives, l2=args.l2)
    doc = {
        "what": "out-of-fold first-stage scores (5-fold by item, first_stage_train recipe)",
        "l2": args.l2,
        "datasets": [f"{d}/train" for d in args.datasets],
        "scores": {i.id: round(float(s), 5) for i, s in zip(items, scores, strict=True)},
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({len(items)} items)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
