"""Build ``auditor_eval_v2.jsonl`` from the hand-written ``texts_v2.yaml`` (deterministic).

Split: within every list (each domain's biased texts, each domain's hard
negatives, the questions) items alternate train, test, train, ... in file order,
so both splits hold every domain, strategy, form and setting in equal measure.
Usage::

    dmt-bench auditor-eval-build-v2 \\
        --out dmt_proxy/data/auditor_eval/auditor_eval_v2.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any, Literal

import yaml

from dmt_bench.auditor_eval.dataset import DATASET_V2, EvalItem
from dmt_proxy.domains import DOMAINS
from dmt_proxy.resources import data_dir

SOURCE = "texts_v2.yaml"
_SPAN = re.compile(r"\[\[(.+?)\]\]", re.DOTALL)


def _split(index: int) -> Literal["train", "test"]:
    return "train" if index % 2 == 0 else "test"


def unmark(text: str) -> tuple[str, str]:
    """The text without ``[[ ]]`` marks, and the marked words (joined by a space)."""
    spans = _SPAN.findall(text)
    return _SPAN.sub(lambda m: m.group(1), text), " ".join(s.strip() for s in spans)


def build(source: dict[str, Any]) -> list[EvalItem]:
    """All items of the set, in a fixed order: biased by domain, hard negatives, questions."""
    items: list[EvalItem] = []
    for domain in DOMAINS:
        for n, raw in enumerate(source["biased"][domain]):
            text, span = unmark(raw["text"])
            if not span:
                raise ValueError(f"biased {domain} #{n + 1} marks no [[span]]")
            items.append(EvalItem(
                id=f"v2-{domain}-b{n + 1:02d}", text=text, label="biased", kind="stereotype",
                domain=domain, strategy=raw["strategy"], target_group=raw["target"],
                split=_split(n), form=raw["form"], setting=raw["setting"], span=span,
            ))  # fmt: skip
    for domain in DOMAINS:
        for n, raw in enumerate(source["hard_negative"][domain]):
            items.append(EvalItem(
                id=f"v2-{domain}-h{n + 1:02d}", text=raw["text"], label="neutral",
                kind="hard_negative", domain=domain, split=_split(n), form=raw["form"],
                setting=raw["setting"],
            ))  # fmt: skip
    for n, raw in enumerate(source["question"]):
        items.append(EvalItem(
            id=f"v2-q{n + 1:02d}", text=raw["text"], label="neutral", kind="question",
            split=_split(n), form=raw["form"], setting=raw["setting"],
        ))  # fmt: skip
    return items


def load_source(path: Path | None = None) -> dict[str, Any]:
    """The shipped ``texts_v2.yaml`` (or ``path``)."""
    path = path or data_dir("auditor_eval") / SOURCE
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    return data


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench auditor-eval-build-v2``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench auditor-eval-build-v2", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument(
        "--out", type=Path, default=data_dir("auditor_eval") / f"{DATASET_V2}.jsonl"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    items = build(load_source(args.source))
    lines = [json.dumps(i.model_dump(exclude_none=True), ensure_ascii=False) for i in items]
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    test = [i for i in items if i.split == "test"]
    print(f"wrote {args.out}: {len(items)} items, test {len(test)} "
          f"({sum(i.biased for i in test)} biased)", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
