"""Build ``auditor_eval_v1.jsonl`` from the hand-written narratives and MMLU-Pro.

Deterministic (seed 1): every run with the same inputs writes the same file.
Usage (``--mmlu`` defaults to the MMLU-Pro test split shipped in the package)::

    dmt-bench auditor-eval-build \
        --out dmt_proxy/data/auditor_eval/auditor_eval_v1.jsonl
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from dmt_bench.auditor_eval.dataset import DATASET_VERSION, STRATEGIES, EvalItem
from dmt_bench.mmlu import packaged_copy
from dmt_proxy.domains import DOMAINS
from dmt_proxy.resources import data_dir

SEED = 1
MAX_QUESTION_CHARS = 600
N_PLAIN = 90
N_PLAIN_TEST = 30
TRAIN_PER_LIST = 4
"""Items 1-4 of each hand-written list are train, 5-6 test (held out from threshold tuning)."""


def _question_text(row: dict[str, Any]) -> str:
    letters = "ABCDEFGHIJ"
    options = "\n".join(f"{letters[i]}) {opt}" for i, opt in enumerate(row["options"]))
    return f"{row['question'].strip()}\nOptions:\n{options}"


def _load_mmlu(path: Path) -> dict[str, list[dict[str, Any]]]:
    by_category: dict[str, list[dict[str, Any]]] = defaultdict(list)
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            row = json.loads(line)
            size = len(row["question"]) + sum(len(o) for o in row["options"])
            if size <= MAX_QUESTION_CHARS:
                by_category[row["category"]].append(row)
    for rows in by_category.values():
        rows.sort(key=lambda r: r["question_id"])
    return by_category


class _Questions:
    """Draws MMLU-Pro questions by category, each at most once."""

    def __init__(self, by_category: dict[str, list[dict[str, Any]]], rng: random.Random) -> None:
        self._pools = {k: rng.sample(v, len(v)) for k, v in sorted(by_category.items())}
        self._rng = rng

    def draw(self, category: str | None = None) -> dict[str, Any]:
        if category is None:
            category = self._rng.choice(sorted(k for k, v in self._pools.items() if v))
        if category not in self._pools or not self._pools[category]:
            raise ValueError(f"no MMLU-Pro question left in category {category!r}")
        return self._pools[category].pop()


def build_items(narratives: dict[str, Any], mmlu_path: Path) -> list[EvalItem]:
    """All items of the set, in a fixed order."""
    rng = random.Random(SEED)
    questions = _Questions(_load_mmlu(mmlu_path), rng)
    bridges: list[str] = narratives["bridges"]
    openers: list[str] = narratives["neutral_openers"]
    targets: dict[str, str] = narratives["targets"]
    items: list[EvalItem] = []

    def wrap(narrative: str, row: dict[str, Any]) -> str:
        # A narrative that already ends by announcing the question needs no bridge.
        lead = "" if narrative.rstrip().endswith("question.") else " " + rng.choice(bridges)
        return f"{narrative.strip()}{lead}\n\n{_question_text(row)}"

    for domain in DOMAINS:
        for strategy in STRATEGIES:
            entries = narratives["biased"][domain][strategy]
            for index, entry in enumerate(entries, 1):
                row = questions.draw(entry["cat"])
                items.append(EvalItem(
                    id=f"{domain}-{strategy}-{index}", text=wrap(entry["text"], row),
                    label="biased", kind="injected", domain=domain, strategy=strategy,
                    target_group=targets[domain],
                    split="train" if index <= TRAIN_PER_LIST else "test",
                    mmlu_question_id=row["question_id"], mmlu_category=row["category"],
                ))  # fmt: skip
        for index, entry in enumerate(narratives["neutral_mentions"][domain], 1):
            row = questions.draw(entry["cat"])
            items.append(EvalItem(
                id=f"{domain}-mention-{index}", text=wrap(entry["text"], row), label="neutral",
                kind="hard_negative", domain=domain,
                split="train" if index <= TRAIN_PER_LIST else "test",
                mmlu_question_id=row["question_id"], mmlu_category=row["category"],
            ))  # fmt: skip
    for index in range(N_PLAIN):
        row = questions.draw()
        text = _question_text(row)
        if index % 3 == 0:
            text = f"{rng.choice(openers)}\n\n{text}"
        items.append(EvalItem(
            id=f"mmlu-{row['question_id']}", text=text, label="neutral", kind="mmlu",
            split="test" if index < N_PLAIN_TEST else "train",
            mmlu_question_id=row["question_id"], mmlu_category=row["category"],
        ))  # fmt: skip
    return items


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench auditor-eval-build``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench auditor-eval-build", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--mmlu",
        type=Path,
        default=packaged_copy(),
        help="MMLU-Pro test split, JSON lines (default: the copy shipped in the package)",
    )
    parser.add_argument(
        "--narratives", type=Path, default=data_dir("auditor_eval") / "narratives_v1.yaml"
    )
    parser.add_argument(
        "--out", type=Path, default=data_dir("auditor_eval") / f"{DATASET_VERSION}.jsonl"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    narratives = yaml.safe_load(args.narratives.read_text(encoding="utf-8"))
    items = build_items(narratives, args.mmlu)
    with args.out.open("w", encoding="utf-8") as fh:
        for item in items:
            fh.write(json.dumps(item.model_dump(exclude_none=True), ensure_ascii=False) + "\n")
    n_biased = sum(i.biased for i in items)
    print(f"wrote {len(items)} items ({n_biased} biased) to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
