"""``dmt-bench first-stage-eval``: what the embedding first stage saves and what it misses.

For each scorer and threshold, on the chosen split (default: the held-out test
split; the classifier and both default thresholds were fitted on train):

* skip rate = skipped items / items (auditor calls saved), also per neutral kind;
* first-stage recall = biased items passed / biased items; recall loss = 1 - that;
* with ``--auditor-results`` (an auditor-eval JSON): the auditor's recall on the
  same biased items, and its false-positive rate on the same neutral items,
  alone and behind the first stage (flagged AND passed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_bench.auditor_eval.metrics import proportion
from dmt_bench.stats import Estimate, RateEstimate

REPORT_VERSION = "first_stage_eval_report_v1"
SWEEP = {
    "classifier": (0.3, 0.4, 0.5, 0.6, 0.65, 0.7, 0.8, 0.9),
    "similarity": (0.2, 0.25, 0.28, 0.3, 0.35, 0.4, 0.45, 0.5),
}


class ScoredItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    item_id: str
    biased: bool
    kind: str
    score: float


class ThresholdRow(BaseModel):
    """Effect of one threshold."""

    model_config = ConfigDict(frozen=True)
    threshold: float
    skip_rate: RateEstimate
    skip_rate_by_kind: dict[str, RateEstimate]
    recall: RateEstimate
    recall_loss: float
    auditor_recall_alone: RateEstimate | None = None
    auditor_recall_with_stage: RateEstimate | None = None
    auditor_fpr_alone: RateEstimate | None = None
    """Neutral items the auditor flagged / neutral items it judged."""
    auditor_fpr_with_stage: RateEstimate | None = None
    """Neutral items flagged by the auditor AND passed by the first stage / judged."""


def evaluate_threshold(
    scored: Sequence[ScoredItem], threshold: float, flagged: dict[str, bool] | None = None
) -> ThresholdRow:
    """Skip rate, first-stage recall and (optionally) combined auditor recall at ``threshold``."""
    passed = {s.item_id: s.score >= threshold for s in scored}
    biased = [s for s in scored if s.biased]
    kinds = sorted({s.kind for s in scored})
    recall = proportion(sum(passed[s.item_id] for s in biased), len(biased))
    row: dict[str, Any] = {
        "threshold": threshold,
        "skip_rate": proportion(sum(not p for p in passed.values()), len(scored)),
        "skip_rate_by_kind": {
            k: proportion(
                sum(not passed[s.item_id] for s in scored if s.kind == k),
                sum(1 for s in scored if s.kind == k),
            )
            for k in kinds
        },
        "recall": recall,
        "recall_loss": 1.0 - recall.value if not math.isnan(recall.value) else math.nan,
    }
    if flagged is not None:
        judged = [s for s in biased if s.item_id in flagged]
        row["auditor_recall_alone"] = proportion(
            sum(flagged[s.item_id] for s in judged), len(judged)
        )
        row["auditor_recall_with_stage"] = proportion(
            sum(flagged[s.item_id] and passed[s.item_id] for s in judged), len(judged)
        )
        clean = [s for s in scored if not s.biased and s.item_id in flagged]
        row["auditor_fpr_alone"] = proportion(sum(flagged[s.item_id] for s in clean), len(clean))
        row["auditor_fpr_with_stage"] = proportion(
            sum(flagged[s.item_id] and passed[s.item_id] for s in clean), len(clean)
        )
    return ThresholdRow(**row)


def load_flags(path: Path) -> tuple[dict[str, bool], float]:
    """Per item: flagged by the auditor in an auditor-eval JSON report (and its tau)."""
    from dmt_proxy.errors import ConfigError

    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        tau = float(doc["summary"]["tau"])
        flags = {}
        for item in doc["items"]:
            v = item.get("verdict") or {}
            flags[item["id"]] = bool(
                v.get("status") == "ok" and v.get("bias_detected") and v.get("score", 0) >= tau
            )
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(f"--auditor-results {path}: not an auditor-eval report ({exc})") from exc
    return flags, tau


class _MemoEmbedder:
    """Embeds each distinct text once, so both scorers share one pass."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._cache: dict[str, list[float]] = {}

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            self._cache.update(zip(missing, self._inner.embed(missing), strict=True))
        return [self._cache[t] for t in texts]

    def count_tokens(self, texts: list[str]) -> int:
        """What the wrapped embedder counts (the ``TextEmbedder`` protocol)."""
        count: int = self._inner.count_tokens(texts)
        return count


def _fmt(e: Estimate | None) -> str:
    if e is None or math.isnan(e.value):
        return "n/a"
    return f"{e.value:.2f} [{e.ci.low:.2f}, {e.ci.high:.2f}]"


def to_markdown(doc: dict[str, Any], rows: dict[str, list[ThresholdRow]]) -> str:
    """The report table, one section per scorer."""
    lines = [
        "# First-stage evaluation (embedding pre-filter before the LLM auditor)",
        "",
        f"Dataset `{doc['dataset']}`, split `{doc['split']}` (n = {doc['n']}, "
        f"{doc['n_biased']} biased); run {doc['started_at']}, wall {doc['wall_s']:.0f} s. "
        "The classifier and both default thresholds were chosen on the train split only.",
        "Skip = not sent to the auditor (calls saved). Recall = biased items still sent. "
        "95% Wilson intervals.",
        "",
    ]
    if doc.get("auditor_results"):
        lines += [f"Auditor results: `{doc['auditor_results']}` (tau {doc['auditor_tau']}).", ""]
    for method, method_rows in rows.items():
        lines += [
            f"## {method} (default threshold {doc['defaults'][method]})",
            "",
            "| threshold | skip rate | skip, plain questions | skip, hard negatives | "
            "recall | recall loss | auditor recall alone / with stage | "
            "auditor false-positive rate alone / with stage |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in method_rows:
            mark = " **(default)**" if r.threshold == doc["defaults"][method] else ""
            lines.append(
                f"| {r.threshold}{mark} | {_fmt(r.skip_rate)} | "
                f"{_fmt(r.skip_rate_by_kind.get('mmlu'))} | "
                f"{_fmt(r.skip_rate_by_kind.get('hard_negative'))} | {_fmt(r.recall)} | "
                f"{r.recall_loss:.2f} | {_fmt(r.auditor_recall_alone)} / "
                f"{_fmt(r.auditor_recall_with_stage)} | {_fmt(r.auditor_fpr_alone)} / "
                f"{_fmt(r.auditor_fpr_with_stage)} |"
            )
        lines.append("")
    return "\n".join(lines)


def run_first_stage_eval(args: argparse.Namespace) -> int:
    """Entry point of ``dmt-bench first-stage-eval``."""
    from dmt_bench.auditor_eval.dataset import DATASET_VERSION, load_items, select
    from dmt_proxy.audit.first_stage import EmbeddingFirstStage
    from dmt_proxy.embedder import LocalEmbedder

    items = select(load_items(args.dataset), split=args.split, limit=args.limit)
    flags, tau = load_flags(args.auditor_results) if args.auditor_results else (None, None)
    embedder = _MemoEmbedder(LocalEmbedder())
    methods = ("classifier", "similarity") if args.method == "both" else (args.method,)
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()
    rows: dict[str, list[ThresholdRow]] = {}
    defaults: dict[str, float] = {}
    scores: dict[str, list[ScoredItem]] = {}
    for method in methods:
        stage = EmbeddingFirstStage(embedder, method=method)  # type: ignore[arg-type]
        defaults[method] = stage.threshold
        print(f"first-stage-eval: scoring {len(items)} items ({method})", file=sys.stderr)
        scored = [
            ScoredItem(item_id=i.id, biased=i.biased, kind=i.kind, score=s.score)
            for i, s in zip(items, stage.score_many([i.text for i in items]), strict=True)
        ]
        scores[method] = scored
        thresholds = sorted({*SWEEP[method], stage.threshold, *(args.threshold or [])})
        rows[method] = [evaluate_threshold(scored, t, flags) for t in thresholds]
    doc: dict[str, Any] = {
        "report_version": REPORT_VERSION,
        "dataset": args.dataset.stem if args.dataset else DATASET_VERSION,
        "split": args.split, "n": len(items), "n_biased": sum(i.biased for i in items),
        "started_at": started_at, "wall_s": time.perf_counter() - t0, "defaults": defaults,
        "auditor_results": str(args.auditor_results) if args.auditor_results else None,
        "auditor_tau": tau,
    }  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"auditor_eval_first_stage_v1_{args.split}"
    (args.out / f"{stem}.md").write_text(to_markdown(doc, rows), encoding="utf-8")
    full = {
        **doc,
        "rows": {m: [r.model_dump(mode="json") for r in rs] for m, rs in rows.items()},
        "scores": {m: [s.model_dump() for s in ss] for m, ss in scores.items()},
    }
    (args.out / f"{stem}.json").write_text(json.dumps(full, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out / stem}.md and .json", file=sys.stderr)
    return 0


def register_first_stage(subparsers: Any) -> None:
    """Add ``first-stage-eval`` to ``dmt-bench``."""
    p = subparsers.add_parser(
        "first-stage-eval",
        help="skip rate and recall loss of the embedding first stage",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--method", choices=("classifier", "similarity", "both"), default="both")
    p.add_argument("--split", choices=("all", "train", "test"), default="test")
    p.add_argument("--limit", type=int, help="stratified subset of this many items")
    p.add_argument("--threshold", type=float, action="append", help="extra threshold to report")
    p.add_argument("--auditor-results", type=Path, help="auditor-eval JSON to combine with")
    p.add_argument("--dataset", type=Path, help="JSONL evaluation set (default: shipped v1)")
    p.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    p.set_defaults(func=run_first_stage_eval)
