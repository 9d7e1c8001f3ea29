"""What memory and each mitigation cost in accuracy: the utility run's one declared family.

Every condition of ``mmlu_utility`` asks the same questions, so conditions are compared
question by question (``dmt_bench.stats.proportions``): accuracy(A) − accuracy(B) over the
questions both answered, Newcombe's paired 95 % interval, McNemar's exact test and the
MDE at 80 % power. The family, declared before the full table was read:

- ``memory``: ``off`` (memories shown, no mitigation) − ``memory-off``: what showing the
  user's memories costs;
- ``ssp``, ``dmt``, ``dmt-tags``, ``dmt-instruction``: that mode − ``off``: what the
  mitigation costs once memories are shown.

Holm's correction over the comparisons of the family that the run's conditions allow;
negative differences are costs. A comparison with a condition the run lacks is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from dmt_bench.stats import NanFloat, holm, multiplicity_note, paired_difference

FAMILY: tuple[tuple[str, str, str], ...] = (
    ("memory", "off", "memory-off"),
    ("ssp", "ssp", "off"),
    ("dmt", "dmt", "off"),
    ("dmt-tags", "dmt-tags", "off"),
    ("dmt-instruction", "dmt-instruction", "off"),
)
"""(name, A, B): each comparison reads accuracy(A) − accuracy(B)."""


class UtilityComparison(BaseModel):
    """One comparison of the family, after Holm's correction."""

    model_config = ConfigDict(frozen=True)
    name: str
    a: str
    b: str
    n: int
    only_a: int
    only_b: int
    difference: NanFloat
    low: NanFloat
    high: NanFloat
    p_value: NanFloat
    holm_p: NanFloat
    reject: bool
    mde: NanFloat


def comparisons(correct: Mapping[str, Mapping[int, bool]]) -> list[UtilityComparison]:
    """The family over ``{condition: {question id: answered correctly}}``."""
    found = []
    for name, a, b in FAMILY:
        if a not in correct or b not in correct:
            continue
        ids = sorted(set(correct[a]) & set(correct[b]))
        if not ids:
            continue
        d = paired_difference([correct[a][i] for i in ids], [correct[b][i] for i in ids])
        found.append((name, a, b, d))
    adjusted = holm({name: d.p_value for name, _, _, d in found})
    return [
        UtilityComparison(
            name=name, a=a, b=b, n=d.counts.n, only_a=d.counts.only_a, only_b=d.counts.only_b,
            difference=d.difference, low=d.low, high=d.high, p_value=d.p_value,
            holm_p=adjusted[name].adjusted, reject=adjusted[name].reject, mde=d.mde,
        )
        for name, a, b, d in found
    ]  # fmt: skip


def _num(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "–"


def comparison_lines(rows: list[UtilityComparison], intervals: int) -> list[str]:
    """The report's paired section and its multiplicity statement (``intervals``: every
    interval the report shows, the per-condition Wilson ones included)."""
    if not rows:
        return []
    lines = [
        "",
        "## Paired differences (the declared family; negative = a cost)",
        "",
        "Same questions under both conditions: right only under A / only under B, "
        "Newcombe's paired 95 % interval, McNemar's exact p, Holm over the family, MDE at "
        "80 % power from the observed discordance.",
        "",
        "| comparison | A − B | n | only A | only B | difference | 95 % CI | p | Holm p | MDE |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.a} − {r.b} | {r.n} | {r.only_a} | {r.only_b} | "
            f"{r.difference:+.3f} | [{r.low:+.3f}, {r.high:+.3f}] | {r.p_value:.3f} | "
            f"{r.holm_p:.3f}{' (rejected)' if r.reject else ''} | {_num(r.mde)} |"
        )
    lines += ["", multiplicity_note(intervals, [f"{r.a} − {r.b}" for r in rows])]
    return lines
