"""The first stage as a gate, per kind of text: two classifiers on train scores and a chat mix.

For every English train item of the labelled sets, an *out-of-fold* score per
classifier (``first_stage_oof``; a set the classifier never saw in training counts as
out-of-fold as it is), and per kind of text:

* passed: the share the gate sends to the LLM (score >= threshold): for a biased kind
  its recall at the gate, for a neutral kind the share the gate cannot clear alone (a
  hard negative that passes may still become a false positive; one that does not cannot);
* decided alone: the count the gate clears without an LLM call (score < threshold);
* confident bias: the share at or above ``confident_bias`` (a dispute if the LLM says clean).

And the ordinary texts of ``benchmarks/audit_mix/chat_mix_v1`` the gate clears alone
(normalised, English only, as ``StagedAuditor`` does). ``decision_rule`` says whether the
candidate replaces the baseline; it reads train splits and the chat mix only (no test
split). Usage::

    dmt-bench first-stage-gate \\
        --baseline first_stage_classifier_v3 \\
        --baseline-oof benchmarks/results/auditor_eval_v2/calibration/first_stage_v3_oof_train.json \\
        --candidate first_stage_classifier_v4 \\
        --candidate-oof benchmarks/results/auditor_eval_v3/first_stage_v4_oof_train.json \\
        --out benchmarks/results/auditor_eval_v3/first_stage_v4_gate_train.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.auditor_eval.first_stage_train import train_items
from dmt_proxy.audit.first_stage import ClassifierWeights, EmbeddingFirstStage, load_classifier
from dmt_proxy.audit.fit import auc
from dmt_proxy.embedder import TextEmbedder

DATASETS = ("auditor_eval_v1", "auditor_eval_v2", "auditor_eval_v3")
HARD_KINDS = frozenset({"hard_negative", "mention_fact", "mention_law", "mention_research",
                        "mention_support", "reported_rejected", "self_description"})  # fmt: skip
"""Neutral texts that name a group (facts, law, research, support, reported speech the
speaker rejects, self-description): what the gate must not mistake for a judgment."""
RECALL_SLACK = 0.02
CHAT_MIX = Path("benchmarks/audit_mix/chat_mix_v1.jsonl")


class GateRow(BaseModel):
    """One kind of text at one classifier's gate."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    dataset: str
    kind: str
    label: str
    n: int
    passed: int
    decided_alone: int
    confident_bias: int


def gate_rows(
    items: Sequence[EvalItem], scores: dict[str, float], model: ClassifierWeights
) -> list[GateRow]:
    """Per (dataset, kind): how the gate of ``model`` treats the items, given their scores."""
    groups: dict[tuple[str, str, str], list[float]] = {}
    for item in items:
        key = (item.id.split("-")[0] if item.id.startswith("v") else "v1", item.kind, item.label)
        groups.setdefault(key, []).append(scores[item.id])
    sure = model.confident_bias if model.confident_bias is not None else 2.0
    rows = []
    for (d, k, label), s in sorted(groups.items()):
        rows.append(GateRow(
            dataset=d, kind=k, label=label, n=len(s),
            passed=sum(v >= model.threshold for v in s),
            decided_alone=sum(v < model.threshold for v in s),
            confident_bias=sum(v >= sure for v in s),
        ))  # fmt: skip
    return rows


def held_out_scores(
    items: Sequence[EvalItem], oof: dict[str, float], stage: EmbeddingFirstStage
) -> dict[str, float]:
    """``oof`` where it has the item, else the classifier's own score (a set it never saw)."""
    missing = [i for i in items if i.id not in oof]
    scored = stage.score_many([i.text for i in missing]) if missing else []
    return {**oof, **{i.id: s.score for i, s in zip(missing, scored, strict=True)}}


def chat_mix_cleared(stage: EmbeddingFirstStage, path: Path = CHAT_MIX) -> tuple[int, int]:
    """(ordinary texts the gate clears alone, ordinary texts) of the chat mix, normalised and
    language-tested as the pipeline does."""
    from dmt_proxy.audit.language import probably_english
    from dmt_proxy.audit.stages import judged_text

    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    texts = [judged_text(r["text"]) for r in rows if r["kind"] == "ordinary"]
    scores = stage.score_many(texts)
    cleared = sum(probably_english(t) and s.score < stage.threshold
                  for t, s in zip(texts, scores, strict=True))  # fmt: skip
    return cleared, len(texts)


def _share(rows: Sequence[GateRow], pick: Any, field: str) -> tuple[int, int]:
    chosen = [r for r in rows if pick(r)]
    return sum(getattr(r, field) for r in chosen), sum(r.n for r in chosen)


def decision_rule(
    base: Sequence[GateRow], cand: Sequence[GateRow], base_auc: float, cand_auc: float,
    base_mix: tuple[int, int], cand_mix: tuple[int, int],
) -> dict[str, Any]:  # fmt: skip
    """Whether the candidate replaces the baseline (all four must hold):

    1. hard negatives and self-descriptions passed by the gate: candidate < baseline;
    2. biased recall at the gate: candidate >= baseline - ``RECALL_SLACK``;
    3. chat-mix ordinary texts cleared alone: candidate >= baseline;
    4. AUC biased vs neutral on auditor_eval_v3/train: candidate >= baseline.
    """
    hard = lambda r: r.kind in HARD_KINDS  # noqa: E731
    biased = lambda r: r.label == "biased"  # noqa: E731
    hb, hc = _share(base, hard, "passed"), _share(cand, hard, "passed")
    rb, rc = _share(base, biased, "passed"), _share(cand, biased, "passed")
    checks = {
        "hard_negative_pass_lower": hc[0] / hc[1] < hb[0] / hb[1],
        "biased_recall_within_slack": rc[0] / rc[1] >= rb[0] / rb[1] - RECALL_SLACK,
        "chat_mix_cleared_not_lower": cand_mix[0] >= base_mix[0],
        "v3_train_auc_not_lower": cand_auc >= base_auc,
    }
    return {"hard_negative_passed": {"baseline": hb, "candidate": hc},
            "biased_recall": {"baseline": rb, "candidate": rc},
            "chat_mix_cleared": {"baseline": base_mix, "candidate": cand_mix},
            "v3_train_auc": {"baseline": round(base_auc, 4), "candidate": round(cand_auc, 4)},
            "checks": checks, "replace": all(checks.values())}  # fmt: skip


def v3_auc(items: Sequence[EvalItem], scores: dict[str, float]) -> float:
    """AUC of biased vs neutral auditor_eval_v3 train items."""
    chosen = [i for i in items if i.id.startswith("v3-")]
    return auc([scores[i.id] for i in chosen], [i.biased for i in chosen])


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench first-stage-gate``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench first-stage-gate", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--baseline", required=True)
    parser.add_argument("--baseline-oof", type=Path, required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--candidate-oof", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dmt_proxy.embedder import LocalEmbedder

    embedder: TextEmbedder = LocalEmbedder()
    items = train_items(DATASETS)
    doc: dict[str, Any] = {"what": __doc__.splitlines()[0], "items": len(items)}
    rows, aucs, mixes = {}, {}, {}
    for role, version, oof_path in (("baseline", args.baseline, args.baseline_oof),
                                    ("candidate", args.candidate, args.candidate_oof)):  # fmt: skip
        model = load_classifier(version)
        stage = EmbeddingFirstStage(embedder, classifier=model)
        oof = json.loads(oof_path.read_text(encoding="utf-8"))["scores"]
        scores = held_out_scores(items, oof, stage)
        rows[role] = gate_rows(items, scores, model)
        aucs[role] = v3_auc(items, scores)
        mixes[role] = chat_mix_cleared(stage)
        doc[role] = {"version": version, "threshold": model.threshold,
                     "confident_bias": model.confident_bias,
                     "confident_clean": model.confident_clean, "oof": str(oof_path),
                     "rows": [r.model_dump() for r in rows[role]]}  # fmt: skip
    doc["rule"] = decision_rule(rows["baseline"], rows["candidate"], aucs["baseline"],
                                aucs["candidate"], mixes["baseline"], mixes["candidate"])  # fmt: skip
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(json.dumps(doc["rule"], indent=1), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
