"""Write judgment_corpus_v1.jsonl, the multilingual judgment-vs-mention training corpus.

    dmt-bench judge-corpus [--seed 1] [--out PATH] [--stats]

Deterministic: one ``random.Random(seed)`` drives every choice, the template data is read
in sorted order, and rows are written sorted by id, so two runs with the same seed and
data give byte-identical files. ``--stats`` prints the count tables of DATA_CARD.md.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dmt_bench.judge_corpus.build import Builder, Row
from dmt_bench.judge_corpus.templates import DOMAINS, KINDS, TEMPLATE_DIR, load

DEFAULT_SEED = 1
DEFAULT_OUT = TEMPLATE_DIR.parent / "judgment_corpus_v1.jsonl"


def record(row: Row, row_id: str) -> dict[str, Any]:
    """The JSON object of one row, keys in a fixed order."""
    return {
        "id": row_id,
        "text": row.text,
        "label": row.label,
        "kind": row.kind,
        "domain": row.domain,
        "group": row.group,
        "trait": row.trait,
        "tendency": row.tendency,
        "manipulation": row.manipulation,
        "language": row.lang,
        "register": row.register,
        "template_family": row.family,
        "pair_id": row.pair_id,
        "split": row.split,
        "turns": row.turns,
        "biased_speaker": row.biased_speaker,
    }


def generate(seed: int = DEFAULT_SEED, root: Path = TEMPLATE_DIR) -> list[dict[str, Any]]:
    """Every record of the corpus, sorted by id."""
    rows = Builder(load(root), seed).build()
    counters: Counter[str] = Counter()
    records = []
    for row in rows:
        counters[row.lang] += 1
        records.append(record(row, f"jc1-{row.lang}-{counters[row.lang]:05d}"))
    return sorted(records, key=lambda r: str(r["id"]))


def dumps(records: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for r in records)


def write(records: Sequence[dict[str, Any]], out: Path) -> str:
    """Write the JSONL file; returns its sha256."""
    data = dumps(records).encode("utf-8")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def stats(records: Sequence[dict[str, Any]]) -> str:
    """Markdown count tables: kind x split x label, languages, registers, domains."""
    c: Counter[tuple[str, ...]] = Counter()
    for r in records:
        c[("kind", r["kind"], r["split"], r["label"])] += 1
        c[("lang", r["language"], r["split"])] += 1
        c[("lang", r["language"], r["label"])] += 1
        c[("register", r["register"], r["split"])] += 1
        c[("domain", str(r["domain"]), r["split"])] += 1
        c[("manipulation", str(r["manipulation"]), r["label"])] += 1
        if r["turns"]:
            c[("exchange", str(r["biased_speaker"]), r["label"])] += 1
    cells = [(s, lab) for s in ("train", "dev") for lab in ("biased", "neutral")]
    kinds = [
        [k, *(c[("kind", k, s, lab)] for s, lab in cells), sum(c[("kind", k, *x)] for x in cells)]
        for k in KINDS
    ]
    langs = [
        [lg, *(c[("lang", lg, x)] for x in ("train", "dev", "biased", "neutral")), len(group)]
        for lg, group in _by(records, "language").items()
    ]
    registers = [
        [g, c[("register", g, "train")], c[("register", g, "dev")]]
        for g in _by(records, "register")
    ]
    domains = [[d, c[("domain", d, "train")], c[("domain", d, "dev")]] for d in (*DOMAINS, "None")]
    other = [
        [f"manipulation={m}", c[("manipulation", m, "biased")], c[("manipulation", m, "neutral")]]
        for m in ("True", "False")
    ]
    other += [
        [
            f"exchange, biased_speaker={s}",
            c[("exchange", s, "biased")],
            c[("exchange", s, "neutral")],
        ]
        for s in ("user", "assistant", "both", "none")
    ]
    return (
        "\n".join(
            [
                "### Kinds\n",
                _table(["kind", *(f"{s} {lab}" for s, lab in cells), "total"], kinds),
                "\n### Languages\n",
                _table(["language", "train", "dev", "biased", "neutral", "total"], langs),
                "\n### Registers\n",
                _table(["register", "train", "dev"], registers),
                "\n### Domains\n",
                _table(["domain", "train", "dev"], domains),
                "\n### Manipulation and exchanges\n",
                _table(["rows", "biased", "neutral"], other),
            ]
        )
        + "\n"
    )


def _by(records: Sequence[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        out.setdefault(str(r[key]), []).append(r)
    return dict(sorted(out.items()))


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench judge-corpus``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench judge-corpus", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--stats", action="store_true", help="print the count tables")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    records = generate(args.seed)
    digest = write(records, args.out)
    print(f"{len(records)} rows -> {args.out} sha256={digest}")
    if args.stats:
        print(stats(records))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
