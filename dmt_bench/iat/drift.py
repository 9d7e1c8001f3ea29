"""Change of implicit and explicit SC between IAT results (e.g. memory at t=0 vs t=T).

``compare_results`` is pure: labelled results in, a ``DriftReport`` out. Every result
is compared with the baseline (the first, unless named). When both runs used the
same base seed the trials are paired (same prompts), and the report also counts
trials that flipped into or out of a stereotypical answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dmt_bench.iat.metrics import newcombe_difference
from dmt_bench.iat.report import Row, table3_markdown, table3_text
from dmt_bench.iat.results import TEST_TYPES, IatResult, TestType
from dmt_bench.iat.stimuli import TABLE3_HEADERS, TABLE3_ORDER, CategoryName
from dmt_bench.stats import CountEstimate, DifferenceEstimate, Estimate
from dmt_proxy.errors import ConfigError

DRIFT_VERSION = "iat_drift_v1"


class PairedFlips(BaseModel):
    """Trials answered (not errors) in both runs with the same prompt, and how they moved."""

    model_config = ConfigDict(frozen=True)

    n_paired: int
    to_stereotype: int
    from_stereotype: int


class DriftEntry(BaseModel):
    """SC of one category and test in the baseline and in a compared result."""

    model_config = ConfigDict(frozen=True)

    category: CategoryName
    test: TestType
    label: str
    before: CountEstimate
    after: CountEstimate
    difference: DifferenceEstimate
    """``after - before`` with a Newcombe 95 % interval."""
    flips: PairedFlips | None


class DriftReport(BaseModel):
    """All comparisons against one baseline, with warnings about comparability."""

    model_config = ConfigDict(frozen=True)

    version: str = DRIFT_VERSION
    baseline: str
    labels: tuple[str, ...]
    entries: tuple[DriftEntry, ...]
    warnings: tuple[str, ...]


def _flips(
    before: IatResult, after: IatResult, category: str, test: TestType
) -> PairedFlips | None:
    def index(result: IatResult) -> dict[str, tuple[int, bool]]:
        return {
            t.key: (t.plan.seed, t.outcome == "stereotypical")
            for t in result.trials
            if t.plan.category == category and t.test == test and t.outcome != "error"
        }

    a, b = index(before), index(after)
    shared = [k for k in a if k in b and a[k][0] == b[k][0]]
    if not shared:
        return None
    to_s = sum(1 for k in shared if not a[k][1] and b[k][1])
    from_s = sum(1 for k in shared if a[k][1] and not b[k][1])
    return PairedFlips(n_paired=len(shared), to_stereotype=to_s, from_stereotype=from_s)


def _warnings(base: Row, other: Row) -> list[str]:
    out = []
    bv, ov = base.result.versions(), other.result.versions()
    for name in bv:
        if bv[name] != ov[name]:
            out.append(
                f"{other.label}: {name} version {ov[name]!r} differs from baseline {bv[name]!r}"
            )
    bc, oc = base.result.config, other.result.config
    if bc.base_seed != oc.base_seed:
        out.append(
            f"{other.label}: base seed {oc.base_seed} != {bc.base_seed}; trials are not paired"
        )
    if (bc.templates, bc.runs) != (oc.templates, oc.runs):
        out.append(f"{other.label}: templates/runs differ from the baseline; trial sets differ")
    if bc.temperature != oc.temperature:
        out.append(f"{other.label}: temperature {oc.temperature} != {bc.temperature}")
    return out


def compare_results(rows: Sequence[Row], baseline: str | None = None) -> DriftReport:
    """Compare every result with the baseline, per category (in both) and test type."""
    if len(rows) < 2:
        raise ConfigError("iat-drift needs at least two results")
    labels = [r.label for r in rows]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"result labels must be unique, got {labels}")
    base_label = baseline if baseline is not None else labels[0]
    if base_label not in labels:
        raise ConfigError(f"baseline {base_label!r} is not one of {labels}")
    base = next(r for r in rows if r.label == base_label)
    entries: list[DriftEntry] = []
    warnings: list[str] = []
    for other in rows:
        if other.label == base_label:
            continue
        warnings += _warnings(base, other)
        shared = set(base.result.config.categories) & set(other.result.config.categories)
        for category in (c for c in TABLE3_ORDER if c in shared):
            for test in TEST_TYPES:
                before, after = (
                    base.result.score(category, test),
                    other.result.score(category, test),
                )
                if before is None or after is None:
                    continue
                entries.append(
                    DriftEntry(
                        category=category,
                        test=test,
                        label=other.label,
                        before=before.sc,
                        after=after.sc,
                        difference=newcombe_difference(before.sc, after.sc),
                        flips=_flips(base.result, other.result, category, test),
                    )
                )
    return DriftReport(
        baseline=base_label, labels=tuple(labels), entries=tuple(entries), warnings=tuple(warnings)
    )


def _p(p: Estimate) -> str:
    return "-" if not p.defined else f"{p.value:.2f} [{p.ci.low:.2f}, {p.ci.high:.2f}] (n={p.n})"


def _d(d: Estimate) -> str:
    if not d.defined:
        return "-"
    return f"{d.value:+.2f} [{d.ci.low:+.2f}, {d.ci.high:+.2f}]"


def _f(f: PairedFlips | None) -> str:
    return "-" if f is None else f"+{f.to_stereotype} / -{f.from_stereotype} of {f.n_paired}"


_HEAD = [
    "Compared",
    "Category",
    "Test",
    "Baseline SC [95% CI]",
    "SC [95% CI]",
    "Δ SC [95% CI]",
    "Flips (to / from stereo)",
]


def _body(report: DriftReport) -> list[list[str]]:
    return [
        [
            e.label,
            TABLE3_HEADERS[e.category],
            e.test,
            _p(e.before),
            _p(e.after),
            _d(e.difference),
            _f(e.flips),
        ]
        for e in report.entries
    ]


def changes_text(report: DriftReport) -> str:
    """Plain-text table of the differences only, then the warnings."""
    table = [_HEAD, *_body(report)]
    widths = [max(len(r[i]) for r in table) for i in range(len(_HEAD))]
    lines = [f"Change vs baseline {report.baseline!r}:"]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    lines += [f"warning: {w}" for w in report.warnings]
    return "\n".join(lines)


def changes_markdown(report: DriftReport) -> str:
    """Markdown table of the differences only."""
    head = "| " + " | ".join(_HEAD) + " |\n|" + "---|" * len(_HEAD)
    body = "\n".join("| " + " | ".join(r) + " |" for r in _body(report))
    return f"{head}\n{body}"


def drift_text(report: DriftReport, rows: Sequence[Row]) -> str:
    """Plain-text drift report: Table 3 for every result, then the differences."""
    return f"{table3_text(rows)}\n\n{changes_text(report)}"


def drift_markdown(report: DriftReport, rows: Sequence[Row]) -> str:
    """Markdown drift report."""
    warn = "\n".join(f"- {w}" for w in report.warnings) or "- none"
    return f"""# IAT drift vs baseline `{report.baseline}` ({DRIFT_VERSION})

## Stereotypical Score per result

{table3_markdown(rows)}

## Change (after - baseline)

{changes_markdown(report)}

Δ intervals: Newcombe hybrid score (independent samples; conservative when trials are
paired). Flips count paired trials (same prompt and seed in both runs) that became
stereotypical (+) or stopped being so (-).

## Warnings

{warn}
"""
