"""How many calls a dose config makes and how long they should take (printed before a run).

Counts are exact: the cells still to ask (``cells.audits`` less those on disk) times
the DIB sample, and the seed writes (audited when the seeds are written in a mode
that audits). Seconds per call come from, in order: the run directory being resumed
(its cells' wall time per decision, its scopes' drain time per audited write), a
live probe of the agent (a few decisions of one context, straight to the model,
one after another), or fixed assumptions (flagged). A DIB decision with memory costs
about what one without does once the memory block is in the server's prefix cache
(``benchmarks/results/dib_memory_speed.md``), so the probe's memory-less decisions
stand for all of them; the estimate divides by ``execution.dib_concurrency``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_proxy.bench.dose import cells as c
from dmt_proxy.bench.dose.config import DoseConfig
from dmt_proxy.bench.harness.models import RoleEstimate
from dmt_proxy.settings import Settings

ASSUMED_S = {"dib": 6.0, "audit": 30.0}
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


def latencies_from_run(out: Path, config: DoseConfig) -> dict[str, float]:
    """Seconds per decision (cell wall time ÷ decisions) and per audited write of a run."""
    per_decision = [
        record.elapsed_s / len(record.results)
        for cell in c.audits(config)
        if (record := c.read_cell(out, cell)) is not None and record.results
    ]
    drains = [
        seeded.drain_s / seeded.scope.k
        for scope in c.scopes(config)
        if (seeded := c.read_scope(out, scope)) is not None
        and seeded.scope.k
        and seeded.write_mode != "off"
    ]
    out_lat: dict[str, float] = {}
    if per_decision:
        # Wall time already reflects the concurrency: undo the division build() applies.
        out_lat["dib"] = statistics.median(per_decision) * config.execution.dib_concurrency
    if drains:
        out_lat["audit"] = statistics.median(drains)
    return out_lat


async def probe(config: DoseConfig, settings: Settings) -> dict[str, float]:
    """Median latency of a few decisions of one context asked straight to the agent."""
    from dmt_proxy.bench.dib.scorer import ask
    from dmt_proxy.bench.dose.runner import dose_samples, scoring_config
    from dmt_proxy.bench.endpoint import Endpoint
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
    from dmt_proxy.bench.dose.runner import dose_samples

    n = len(dose_samples(config))
    planned = c.audits(config)
    done_cells = {a for a in planned if out is not None and c.read_cell(out, a) is not None}
    todo = [a for a in planned if a not in done_cells]
    seeded = {s for s in c.scopes(config) if out is not None and c.read_scope(out, s) is not None}
    todo_scopes = [s for s in c.scopes(config) if s not in seeded]
    writes = sum(s.k for s in todo_scopes)
    audited = sum(s.k for s in todo_scopes if config.write_mode(s.kind).audits_writes)
    roles = []
    for role, calls, parallel in (
        ("dib", len(todo) * n, config.execution.dib_concurrency),
        ("audit", audited, 1),
    ):
        lat, where = (latencies[role], label) if role in latencies else (ASSUMED_S[role], "assumed")
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
        f"{est.decisions_per_cell} DIB decisions each; {est.seed_writes} seed writes "
        f"({est.audited_writes} audited)",
        f"{'role':<8} {'calls':>8} {'s/call':>8} {'hours':>7}  latency from",
    ]
    for r in est.roles:
        lines.append(
            f"{r.role:<8} {r.calls:>8,.0f} {r.latency_s:>8.2f} "
            f"{r.seconds / 3600:>7.2f}  {r.latency_source}"
        )
    lines.append(f"total: about {est.total_hours:.1f} h")
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)
