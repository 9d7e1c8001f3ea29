"""How many calls a dose config makes and how long they should take (printed before a run).

Counts are exact: the cells still to ask (``cells.audits`` less those on disk) times
the DIB sample, and the seed writes (audited when the seeds are written in a mode
that audits). Seconds per call come from, in order: the run directory being resumed
(its cells' wall time per decision, its scopes' drain time per audited write), a
live probe of the agent (a few decisions of one context, straight to the model,
one after another), or fixed assumptions (flagged). A DIB decision with memory costs
about what one without does once the memory block is in the server's prefix cache
(``benchmarks/results/perf/dib_memory_speed/dib_memory_speed.md``), so the probe's memory-less decisions
stand for all of them; the estimate divides by ``execution.dib_concurrency``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_bench.dose import cells as c
from dmt_bench.dose.config import DoseConfig
from dmt_bench.harness.models import RoleEstimate
from dmt_proxy.settings import Settings

ASSUMED_S = {"dib": 6.0, "dib_empty": 6.0, "audit": 30.0}
"""Seconds per DIB decision and per audited write on a 2-core machine (without data)."""
PROBE_DECISIONS = 3


class DoseEstimate(BaseModel):
    """The dry-run answer."""

    model_config = ConfigDict(frozen=True)
    name: str
    cells_total: int
    cells_todo: int
    decisions_per_cell: int
    seed_writes: int
    audited_writes: int
    roles: list[RoleEstimate]
    total_hours: float
    notes: list[str]


def latencies_from_run(
    out: Path, config: DoseConfig, *, scale: int | None = None, k: int | None = None
) -> dict[str, float]:
    """Seconds per decision (cell wall time ÷ decisions) and per audited write of a run.

    ``dib``: the median over cells with memories, ``dib_empty``: over the k = 0 cells
    (memory-less decisions are faster); ``audit``: seeding wall time ÷ audited writes
    (scopes seeded together record the same drain, counted once). ``k``: only cells with
    k memories give ``dib`` (a planned design whose memory block is that size).
    """
    per_decision: dict[bool, list[float]] = {True: [], False: []}
    for cell in c.audits(config):
        record = c.read_cell(out, cell)
        if record is not None and record.results and (k is None or cell.scope.k in (0, k)):
            per_decision[cell.scope.k > 0].append(record.elapsed_s / len(record.results))
    batches: dict[float, int] = {}
    for scope in c.scopes(config):
        seeded = c.read_scope(out, scope)
        if seeded is not None and seeded.scope.k and seeded.write_mode != "off":
            batches[seeded.drain_s] = batches.get(seeded.drain_s, 0) + seeded.scope.k
    out_lat: dict[str, float] = {}
    # Wall time already reflects the concurrency: undo the division build() applies.
    scale = config.execution.dib_concurrency if scale is None else scale
    if per_decision[True]:
        out_lat["dib"] = statistics.median(per_decision[True]) * scale
    if per_decision[False]:
        out_lat["dib_empty"] = statistics.median(per_decision[False]) * scale
    if batches and sum(batches.values()):
        out_lat["audit"] = sum(batches) / sum(batches.values())
    return out_lat


def latencies_from_other_run(runs: Sequence[Path], *, k: int | None = None) -> dict[str, float]:
    """Planning rates of a design not run yet, from other run directories (their own
    configs, from their manifests): wall seconds per decision as those runs measured them
    (not rescaled by their concurrency, which a resumed run's manifest may not record),
    and seeding seconds per audited write. The first run that has a rate gives it; ``k``:
    memory decisions priced by those runs' cells with k memories only."""
    from dmt_bench.dose.config import parse_dose_config
    from dmt_bench.harness.rundir import MANIFEST, Manifest
    from dmt_proxy.errors import ConfigError

    out: dict[str, float] = {}
    for run in runs:
        path = run / MANIFEST
        if not path.exists():
            raise ConfigError(f"--latencies-from {run}: no {MANIFEST}")
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
        config = parse_dose_config(manifest.config, where=str(path))
        for key, value in latencies_from_run(run, config, scale=1, k=k).items():
            out.setdefault(key, value)
    return out


async def probe(config: DoseConfig, settings: Settings) -> dict[str, float]:
    """Median latency of a few decisions of one context asked straight to the agent."""
    from dmt_bench.dib.scorer import ask
    from dmt_bench.dose.runner import dose_samples, scoring_config
    from dmt_bench.endpoint import Endpoint
    from dmt_proxy.upstream.factory import declared_endpoint

    agent = config.models.agent
    if not agent.is_local and agent.api_base is None:
        raise RuntimeError("probing a hosted agent needs an OpenAI-compatible api_base")
    reach = declared_endpoint(settings, agent.model, api_base=agent.api_base)
    endpoint = Endpoint(base_url=str(reach.api_base), model=reach.model.split("/", 1)[-1])
    samples = dose_samples(config)
    first = samples[0].context_id
    times: list[float] = []
    client = endpoint.client()
    try:
        for sample in [s for s in samples if s.context_id == first][:PROBE_DECISIONS]:
            started = time.perf_counter()
            await ask(sample, endpoint, scoring_config(config), client=client)
            times.append(time.perf_counter() - started)
    finally:
        await client.close()
    return {"dib": statistics.median(times)} if times else {}


def latencies(
    config: DoseConfig, out: Path | None, *, live: bool, settings: Settings
) -> tuple[dict[str, float], str]:
    """The best latencies available, and where they came from."""
    if out is not None and (out / "run.json").exists():
        found = latencies_from_run(out, config)
        if found:
            return found, f"run {out}"
    if live:
        print("dose: probing the agent for its latency ...", file=sys.stderr)
        try:
            return asyncio.run(probe(config, settings)), "probe"
        except Exception as exc:  # any failure only means "no measurement"; say why
            print(
                f"dose: probe failed ({type(exc).__name__}: {exc}); using assumptions",
                file=sys.stderr,
            )
    return {}, "assumed"


def build(
    config: DoseConfig, out: Path | None, latencies: dict[str, float], label: str
) -> DoseEstimate:
    """Counts × latencies, per role and in total."""
    from dmt_bench.dose.runner import dose_samples, scope_samples

    samples = dose_samples(config)
    n = len(samples)
    planned = c.audits(config)
    done_cells = {a for a in planned if out is not None and c.read_cell(out, a) is not None}
    todo = [a for a in planned if a not in done_cells]
    decisions = sum(len(scope_samples(config, a.scope, samples)) for a in todo if a.scope.k)
    empty_decisions = sum(len(samples) for a in todo if not a.scope.k)
    seeded = {s for s in c.scopes(config) if out is not None and c.read_scope(out, s) is not None}
    todo_scopes = [s for s in c.scopes(config) if s not in seeded]
    writes = sum(s.k for s in todo_scopes)
    audited = sum(s.k for s in todo_scopes if config.write_mode(s.kind).audits_writes)
    roles = []
    rates = dict(latencies)
    if "dib" in rates:
        rates.setdefault("dib_empty", rates["dib"])
    for role, calls, parallel in (
        ("dib_empty", empty_decisions, config.execution.dib_concurrency),
        ("dib", decisions, config.execution.dib_concurrency),
        ("audit", audited, 1),
    ):
        if role in rates:
            lat, where = rates[role], label
        else:
            lat, where = ASSUMED_S[role], "assumed"
        roles.append(
            RoleEstimate(
                role=role,
                calls=float(calls),
                latency_s=round(lat, 2),
                latency_source=where,
                seconds=calls * lat / parallel,
            )
        )
    notes = []
    if any(r.latency_source == "assumed" for r in roles):
        notes.append("some latencies are assumptions, not measurements")
    notes.append(
        "the machine's load changes these: on a shared machine, rerun with --dry-run on a "
        "resumed run directory for its measured rate"
    )
    return DoseEstimate(
        name=config.name,
        cells_total=len(planned),
        cells_todo=len(todo),
        decisions_per_cell=n,
        seed_writes=writes,
        audited_writes=audited,
        roles=roles,
        total_hours=round(sum(r.seconds for r in roles) / 3600, 2),
        notes=notes,
    )


def render(est: DoseEstimate) -> str:
    """Plain-text table of the estimate."""
    lines = [
        f"cost estimate: {est.name} — {est.cells_todo} of {est.cells_total} cells to ask, "
        f"up to {est.decisions_per_cell} DIB decisions each "
        f"({sum(r.calls for r in est.roles if r.role.startswith('dib')):,.0f} in all); "
        f"{est.seed_writes} seed writes ({est.audited_writes} audited)",
        f"{'role':<10} {'calls':>8} {'s/call':>8} {'hours':>7}  latency from",
    ]
    for r in est.roles:
        lines.append(
            f"{r.role:<10} {r.calls:>8,.0f} {r.latency_s:>8.2f} "
            f"{r.seconds / 3600:>7.2f}  {r.latency_source}"
        )
    lines.append(f"total: about {est.total_hours:.1f} h")
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)
