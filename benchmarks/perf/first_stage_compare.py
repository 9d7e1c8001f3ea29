"""The embedding classifier versions on the v1 and v2 test splits (no LLM; minutes on CPU).

For each classifier and test split: AUC of the item scores, recall and neutral skip
rate at the classifier's own threshold, how many biased and neutral items reach its
``confident_bias`` level (the dispute trigger), and the domain head's accuracy on the
biased items. Writes ``benchmarks/results/first_stage_compare/first_stage_compare.{json,md}``. Usage::

    python benchmarks/perf/first_stage_compare.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result

from dmt_bench.auditor_eval.dataset import dataset_path, load_items
from dmt_proxy.audit.first_stage import EmbeddingFirstStage, load_classifier
from dmt_proxy.audit.fit import auc
from dmt_proxy.embedder import LocalEmbedder

VERSIONS = ("first_stage_classifier_v2", "first_stage_classifier_v3")
SETS = ("auditor_eval_v1", "auditor_eval_v2")
OUT = Path("benchmarks/results/first_stage_compare/first_stage_compare")


def main() -> int:
    embedder = LocalEmbedder()
    rows = []
    for version in VERSIONS:
        model = load_classifier(version)
        stage = EmbeddingFirstStage(embedder, classifier=model)
        for name in SETS:
            items = [i for i in load_items(dataset_path(name)) if i.split == "test"]
            scores = stage.score_many([i.text for i in items])
            biased = [i.biased for i in items]
            values = [s.score for s in scores]
            conf = model.confident_bias if model.confident_bias is not None else 2.0
            n_b = sum(biased)
            n_n = len(items) - n_b
            domain_ok = sum(
                1 for i, s in zip(items, scores, strict=True)
                if i.biased and s.domain_probs
                and max(s.domain_probs, key=lambda d: s.domain_probs[d]) == i.domain
            )  # fmt: skip
            rows.append({
                "classifier": version, "trained_on": model.trained_on, "set": name,
                "n": len(items), "auc": round(auc(values, biased), 3),
                "threshold": model.threshold,
                "recall": round(sum(v >= model.threshold for v, b in zip(values, biased, strict=True) if b) / n_b, 3),
                "neutral_skip": round(sum(v < model.threshold for v, b in zip(values, biased, strict=True) if not b) / n_n, 3),
                "confident_bias": model.confident_bias,
                "biased_at_confident": sum(v >= conf for v, b in zip(values, biased, strict=True) if b),
                "neutral_at_confident": sum(v >= conf for v, b in zip(values, biased, strict=True) if not b),
                "biased": n_b, "neutral": n_n,
                "domain_head_accuracy": round(domain_ok / n_b, 3),
            })  # fmt: skip
    lines = [
        "# Embedding classifier versions on the test splits (`benchmarks/perf/first_stage_compare.py`)",
        "",
        "Rerun: `python benchmarks/perf/first_stage_compare.py` (no LLM; the local embedding "
        "model on CPU, deterministic).",
        "",
        "| classifier | trained on | test set | n | AUC | threshold | recall | neutral skipped | "
        "biased >= confident_bias | neutral >= confident_bias | domain head accuracy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['classifier']} | {r['trained_on']} | {r['set']} | {r['n']} | {r['auc']} | "
            f"{r['threshold']} | {r['recall']} | {r['neutral_skip']} | {r['biased_at_confident']} / "
            f"{r['biased']} | {r['neutral_at_confident']} / {r['neutral']} | {r['domain_head_accuracy']} |"
        )
    write_result(OUT, rows, "\n".join(lines) + "\n", indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
