"""What a compare run can and cannot show: its primary family, noise floor and stability.

Read by ``sim.report`` (``sim-report-v4``):

- **primary family**, declared here for every compare run: at T, each mitigation
  condition's absolute mitigation ΔAGBV(condition) − ΔAGBV(no mitigation), paired by
  context, with its jackknife-t interval and t test, Holm-corrected over the
  conditions (``stats.holm``); every other interval in the report is exploratory;
- **the noise floor as a test**: GBV's floor shuffles group labels within each context,
  and with two contexts of K groups its smallest attainable p is 1/K!
  (``stats.within_cluster_min_p``). Where that exceeds α = 0.05, "AGBV inside its noise
  floor" holds whatever the true bias, so the report says the floor comparison is
  "not testable at α=0.05 with this design" instead;
- **unstable contexts** (``dib.readouts.unstable_contexts``) per audit;
- **caveats** generated from the data: an unfinished run, domains with too few DIB
  contexts for a CI.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dmt_bench.dib.readouts import INSTABILITY_THRESHOLD
from dmt_bench.sim.results import ArchResult, CompareResults
from dmt_bench.stats import ALPHA, ClusterEstimate, holm

BASE = "baseline"


class MitigationTest(BaseModel):
    """One condition's absolute mitigation at T, before and after Holm."""

    model_config = ConfigDict(frozen=True)
    memory: str
    condition: str
    estimate: ClusterEstimate
    holm_p: float
    reject: bool


def primary_family(results: CompareResults) -> list[MitigationTest]:
    """ΔAGBV(c, T) − ΔAGBV(no mitigation, T) per architecture and condition, Holm-corrected."""
    members: dict[tuple[str, str], ClusterEstimate] = {}
    for arch in results.archs:
        for d in arch.deltas:
            x = d.readouts.get(results.headline)
            if d.t != results.turns or d.condition == BASE or x is None:
                continue
            if x.vs_base_jk is not None:
                members[(arch.memory, d.condition)] = x.vs_base_jk
    adjusted = holm({f"{m}/{c}": e.p_value for (m, c), e in members.items()}, alpha=ALPHA)
    return [
        MitigationTest(
            memory=m,
            condition=c,
            estimate=e,
            holm_p=adjusted[f"{m}/{c}"].adjusted,
            reject=adjusted[f"{m}/{c}"].reject,
        )
        for (m, c), e in members.items()
    ]


def floor_note(arch: ArchResult) -> str | None:
    """Whether the label-shuffle noise floor of ``arch``'s audits can reject at α.

    Uses the last checkpoint's per-domain smallest attainable p (the design is the
    same at every checkpoint). None for results without ``floor_min_p`` (before v3).
    """
    rows = [r for r in arch.checkpoints if r.floor_min_p]
    if not rows:
        return None
    min_p = {d: p for d, p in rows[-1].floor_min_p.items() if p is not None}
    blocked = {d: p for d, p in min_p.items() if p > ALPHA}
    open_ = sorted(d for d in min_p if d not in blocked)
    if not blocked:
        return None
    two = set(arch.contexts.values()) == {2}
    formula = "1/K!" if two else "K_max!/Π_c K_c!"
    by_p = ", ".join(f"{p:.3g} ({', '.join(sorted(d for d in blocked if blocked[d] == p))})"
                     for p in sorted(set(blocked.values())))  # fmt: skip
    text = (
        f'Noise floor ({arch.memory}): "AGBV inside its noise floor" is not testable at '
        f"α={ALPHA:g} with this design (smallest attainable p = {formula} = {by_p}) in "
        f"{len(blocked)} of {len(min_p)} domains: the floor shuffles group labels within "
        "each context, and where no shuffle can reach α a GBV never exceeds its p95 floor, "
        "whatever the true bias. The floor comparison is not a finding either way."
    )
    if open_:
        text += (
            f" Testable only in {', '.join(open_)}, at best at p = "
            f"{min(min_p[d] for d in open_):.2g}."
        )
    return text


def instability_summary(arch: ArchResult) -> list[str]:
    """Per condition, the checkpoints with an unstable context, and which contexts."""
    lines = []
    by_cond: dict[str, list[str]] = {}
    for r in sorted(arch.checkpoints, key=lambda r: (r.condition, r.t)):
        for u in r.unstable:
            by_cond.setdefault(r.condition, []).append(f"t={r.t} {u.describe()}")
    for cond, items in by_cond.items():
        lines.append(f"Unstable contexts ({arch.memory}, {cond}): " + "; ".join(items))
    if not lines and any(r.floor_min_p for r in arch.checkpoints):  # v3 results
        lines.append(
            f"No unstable context in {arch.memory}'s audits (group scores spread ≥ "
            f"{INSTABILITY_THRESHOLD:g} points)."
        )
    return lines


def fmt(x: float, spec: str = "+.2f") -> str:
    """A number, or ``n/a`` when undefined."""
    return format(x, spec) if math.isfinite(x) else "n/a"


def primary_rows(family: Sequence[MitigationTest], labels: dict[str, str]) -> list[list[str]]:
    """The primary table: absolute mitigation at T with p, Holm p and MDE."""
    rows = [
        [
            "Memory",
            "Condition",
            "ΔAGBV(c) − ΔAGBV(no mitigation) at T [95% CI]",
            "p",
            "Holm p",
            "MDE",
            "after Holm",
        ]
    ]
    for f in family:
        e = f.estimate
        rows.append(
            [
                f.memory,
                labels.get(f.condition, f.condition),
                f"{fmt(e.value)} [{fmt(e.low)}, {fmt(e.high)}]",
                fmt(e.p_value, ".3f"),
                fmt(f.holm_p, ".3f"),
                fmt(e.mde, ".2f"),
                "confirmed" if f.reject else "not confirmed",
            ]
        )
    return rows


COARSE_BELOW = 5
"""Domains with fewer DIB contexts than this get a note that their CIs are coarse."""


def has_jackknife(results: CompareResults) -> bool:
    """Whether the results carry jackknife-t estimates (``sim-results-v3`` on)."""
    return any(
        x.delta_jk is not None for a in results.archs for d in a.deltas for x in d.readouts.values()
    )


def thin_domains(arch: ArchResult) -> list[str]:
    """Domains of ``arch`` with fewer than two DIB contexts (no bootstrap CI)."""
    return [d for d, n in arch.contexts.items() if n < 2]


def unaudited(results: CompareResults, arch: ArchResult) -> str:
    """The checkpoints each condition still lacks, e.g. ``ssp t=80,100; dmt all``; '' if none."""
    done: dict[str, set[int]] = {c: set() for c in results.config["conditions"]}
    for r in arch.checkpoints:
        done.setdefault(r.condition, set()).add(r.t)
    parts = []
    for c, ts in done.items():
        left = [t for t in results.checkpoints if t not in ts]
        if left:
            parts.append(f"{c} " + ("all" if not ts else "t=" + ",".join(map(str, left))))
    return "; ".join(parts)


def caveats(results: CompareResults) -> list[str]:
    """What the data say about an unfinished run and missing CIs, in words."""
    out: list[str] = []
    for arch in results.archs:
        unfinished = unaudited(results, arch)
        if unfinished:
            out.append(
                f"{arch.memory}: an unfinished run (dmt-bench report --partial); not audited yet: "
                f"{unfinished}. Numbers that need those audits are left out."
            )
        thin = thin_domains(arch)
        same = (
            "With one context a domain's noise p95 equals its GBV: shuffling group labels "
            "within one context cannot change the spread of the group means. Sample at least "
            "two contexts per domain (dib-sample-v2, the default of version-2 configs)."
        )
        if thin and len(thin) == len(arch.contexts):
            out.append(
                f"{arch.memory}: every domain had a single DIB context, so nothing can be "
                f"resampled and there is no CI anywhere. {same}"
            )
        elif thin:
            names = ", ".join(thin)
            verb = "it has" if len(thin) == 1 else "they have"
            out.append(
                f"{arch.memory}: {names} had a single DIB context, so {verb} no bootstrap CI, "
                "and neither have AGBV, ΔAGBV, the mean shift and MP, which average over every "
                "domain (a CI over the other domains would not be the CI of the estimate); the "
                f"other domains keep their own CIs. {same}"
            )
        few = [d for d, n in arch.contexts.items() if 2 <= n < COARSE_BELOW]
        if few and has_jackknife(results):
            out.append(
                f"{arch.memory}: {', '.join(few)} had {COARSE_BELOW - 1} DIB contexts or fewer; "
                "the jackknife-t interval accounts for that with t quantiles on "
                "(contexts − 1) df per domain (12.7 × SE at one df), so its CIs are wide, "
                "and a per-domain CI from 2 contexts rests on one df."
            )
        elif few:
            out.append(
                f"{arch.memory}: {', '.join(few)} had {COARSE_BELOW - 1} DIB contexts or fewer; "
                "a percentile bootstrap over so few contexts has few distinct resamples (3 "
                "with two contexts), so those CIs are coarse, too narrow, and can exclude "
                "their own point estimate."
            )
        if not arch.contexts and any(not math.isfinite(d.delta.ci.low) for d in arch.deltas):
            out.append(
                f"{arch.memory}: no CIs; at least one domain had fewer than two DIB contexts "
                "(results written before sim-results-v2 do not record which)."
            )
    return out
