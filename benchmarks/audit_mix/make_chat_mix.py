"""Build ``chat_mix_v1.jsonl``: a realistic chat mix for the audit throughput benchmark.

80 % ordinary chat messages (``ordinary_questions_v1.txt``, 120 written for this mix: code,
cooking, travel, money, health, a few personal facts) and 20 % group-related texts (30)
taken from the TRAIN splits of the labelled sets (never a test split): half biased, half
texts that name a group without judging it (hard negatives, questions, self-description,
facts, law, research, support, reported speech the speaker rejects). Deterministic (seed 0).
Run from the repository root::

    python benchmarks/audit_mix/make_chat_mix.py
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).parent
DATA = HERE.parent.parent / "dmt_proxy" / "data" / "auditor_eval"
VERSION = "chat_mix_v1"
# (set, label, kinds, how many): 15 biased and 15 group-mentioning neutral texts.
DRAWS = [
    ("auditor_eval_v2", "biased", {"stereotype"}, 8),
    ("auditor_eval_v2", "neutral", {"hard_negative", "question"}, 4),
    ("auditor_eval_v3", "biased", {"judgment", "benevolent"}, 7),
    ("auditor_eval_v3", "neutral", {"self_description", "mention_fact", "mention_support",
                                    "reported_rejected", "mention_law", "mention_research"}, 11),
]  # fmt: skip


def main() -> None:
    """Write the mix next to this script."""
    rng = random.Random(0)
    rows: list[dict[str, object]] = []
    ordinary = [t.strip() for t in (HERE / "ordinary_questions_v1.txt").read_text().splitlines()]
    for n, text in enumerate(t for t in ordinary if t):
        rows.append({"id": f"mix-o{n:03d}", "text": text, "kind": "ordinary", "label": "neutral",
                     "source": "ordinary_questions_v1"})  # fmt: skip
    for dataset, label, kinds, count in DRAWS:
        items = [json.loads(line) for line in (DATA / f"{dataset}.jsonl").read_text().splitlines()]
        pool = [
            i for i in items if i["split"] == "train" and i["label"] == label and i["kind"] in kinds
        ]
        for item in rng.sample(pool, count):
            rows.append({"id": f"mix-{item['id']}", "text": item["text"], "kind": "group",
                         "label": label, "domain": item.get("domain"),
                         "source": f"{dataset}:{item['id']} (train, {item['kind']})"})  # fmt: skip
    rng.shuffle(rows)
    out = HERE / f"{VERSION}.jsonl"
    out.write_text(
        "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8"
    )
    group = sum(r["kind"] == "group" for r in rows)
    print(f"{out}: {len(rows)} rows, {group} group-related ({group / len(rows):.0%})")


if __name__ == "__main__":
    main()
