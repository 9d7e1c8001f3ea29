"""``--dry-run``: how many model calls a config makes and how long they should take.

Counts are exact where the design fixes them (the stream plan, checkpoints, the
DIB sample, t=0 sharing) and expected values elsewhere (generator attempts per
rewrite). Latency per call comes from, in order: a previous run's ``calls.jsonl``
(``--latencies DIR``), a few live probe calls to the configured models, or
fixed assumptions (flagged as such). Audit calls run inside the proxy; their
latency is taken from a previous run's turn drain times, else assumed equal to
one generator call. Time assumes calls run one after another, except DIB
decisions, which run ``execution.dib_concurrency`` at a time on the model's slots.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_bench.harness.models import RoleEstimate
from dmt_bench.mmlu import load_source
from dmt_bench.sim.config import CONDITION_MODE, SimConfig
from dmt_bench.sim.stream import build_plan, stream_spec
from dmt_proxy.settings import Settings

ASSUMED_S = {"agent": 10.0, "dib": 3.0, "generator": 30.0, "audit": 20.0}
"""Per-call seconds on a 2-core machine with the embedded models (used without data)."""
ATTEMPTS_PER_REWRITE = 1.5


class Estimate(BaseModel):
    """The dry-run answer."""

    model_config = ConfigDict(frozen=True)
    name: str
    turns: int
    checkpoints: list[int]
    dib_decisions_per_audit: int
    threads: int
    roles: list[RoleEstimate]
    total_calls: float
    total_hours: float
    notes: list[str]


def call_counts(config: SimConfig, dib_per_audit: int, planned_injections: int) -> dict[str, float]:
    """Model calls per role for ``config`` (see the module docstring)."""
    ckpts = len(config.checkpoints())
    archs = len(config.memory)
    if config.kind == "heatmap":
        threads = len(config.heatmap_sources)
        dmt = 0
        t0_audits = 1 if config.share_t0 else threads
        rewrites = planned_injections * len(config.heatmap_sources)
    else:
        threads = len(config.conditions) * archs
        dmt = sum(CONDITION_MODE[c].audits_writes for c in config.conditions) * archs
        ssp_settings = {CONDITION_MODE[c].uses_ssp for c in config.conditions}
        t0_audits = len(ssp_settings) if config.share_t0 else threads
        rewrites = planned_injections
    audits = threads * (ckpts - 1) + t0_audits
    return {
        "generator": rewrites * ATTEMPTS_PER_REWRITE,
        "agent": float(threads * config.turns),
        "audit": float(dmt * config.turns),
        "dib": float(audits * dib_per_audit),
    }


def latencies_from_run(run_dir: Path) -> dict[str, float]:
    """Median latency per role from a previous run (auditor: median turn drain in DMT modes)."""
    from dmt_bench.sim.results import read_latencies

    # calls.jsonl, or the .gz a committed run keeps
    roles = read_latencies(run_dir / "calls.jsonl")
    drains: list[float] = []
    for turns in run_dir.glob("*/*/turns.jsonl"):
        for line in turns.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("memory_status") in ("tagged", "clean", "failed"):
                drains.append(float(rec.get("drain_s", 0.0)))
    if drains:
        roles["audit"] = drains
    return {role: statistics.median(xs) for role, xs in roles.items() if xs}


async def probe_latencies(config: SimConfig, settings: Settings) -> dict[str, float]:
    """One live call per role against the configured models (agent direct, not via a proxy)."""
    import openai

    from dmt_bench.dib.scorer import ask
    from dmt_bench.endpoint import Endpoint
    from dmt_bench.sim.bias_list import load_bias_list
    from dmt_bench.sim.injection import BiasGenerator
    from dmt_bench.sim.runner import (
        dib_samples,
        generator_call,
        generator_chat,
        scoring_config,
    )
    from dmt_proxy.upstream.factory import declared_endpoint

    agent = config.models.agent
    if not agent.is_local and agent.api_base is None:
        raise RuntimeError("probing a hosted agent needs an OpenAI-compatible api_base")
    reach = declared_endpoint(settings, agent.model, api_base=agent.api_base)
    base = str(reach.api_base)
    name = reach.model.split("/", 1)[-1]  # the server's own name for it
    question = load_source(config.stream.source).questions[0]
    out: dict[str, float] = {}
    client = openai.AsyncOpenAI(base_url=base, api_key="probe", timeout=600, max_retries=0)
    started = time.perf_counter()
    await client.chat.completions.create(
        model=name,
        messages=[{"role": "user", "content": question.plain_prompt()}],
        max_tokens=config.agent.max_tokens,
        temperature=0.0,
    )
    out["agent"] = time.perf_counter() - started
    endpoint = Endpoint(base_url=base, model=name)
    sample = dib_samples(config)[0]
    started = time.perf_counter()
    await ask(sample, endpoint, scoring_config(config), client=client)
    out["dib"] = time.perf_counter() - started
    await client.close()
    if config.injection.rate > 0:
        chat = generator_chat(settings)
        gen = BiasGenerator(
            chat,
            generator_call(config, settings),
            prompt_version=config.injection.prompt,
            intact_policy=config.injection.intact_policy,
            max_attempts=1,
        )
        started = time.perf_counter()
        try:
            await gen.rewrite(
                question, load_bias_list(config.injection.bias_list).for_domain("age"), seed=0
            )
        finally:
            await chat.aclose()
        out["generator"] = time.perf_counter() - started
    return out


def build_estimate(
    config: SimConfig, latencies: dict[str, float], source_label: str, dib_per_audit: int
) -> Estimate:
    """Counts × latencies, per role and in total."""
    source = load_source(config.stream.source)
    plan = build_plan(stream_spec(config, source), source.questions)
    counts = call_counts(config, dib_per_audit, sum(p.inject for p in plan))
    roles = []
    notes = []
    for role, calls in counts.items():
        if role in latencies:
            lat, where = latencies[role], source_label
        else:
            lat, where = ASSUMED_S[role], "assumed"
            if role == "audit" and "generator" in latencies:
                lat, where = latencies["generator"], f"{source_label} (generator call)"
        parallel = config.execution.dib_concurrency if role == "dib" else 1
        roles.append(
            RoleEstimate(
                role=role,
                calls=round(calls, 1),
                latency_s=round(lat, 2),
                latency_source=where,
                seconds=calls * lat / parallel,
            )
        )
    if any(r.latency_source == "assumed" for r in roles):
        notes.append("some latencies are assumptions, not measurements")
    notes.append("with memory, agent and DIB prompts grow by up to top_k retrieved memories")
    ckpts = config.checkpoints()
    threads = (
        len(config.heatmap_sources)
        if config.kind == "heatmap"
        else (len(config.conditions) * len(config.memory))
    )
    return Estimate(
        name=config.name,
        turns=config.turns,
        checkpoints=ckpts,
        dib_decisions_per_audit=dib_per_audit,
        threads=threads,
        roles=roles,
        total_calls=round(sum(r.calls for r in roles), 1),
        total_hours=round(sum(r.seconds for r in roles) / 3600, 2),
        notes=notes,
    )


def render_estimate(est: Estimate) -> str:
    """Plain-text table of the estimate."""
    lines = [
        f"dry run: {est.name} — T={est.turns}, checkpoints {est.checkpoints}, "
        f"{est.dib_decisions_per_audit} DIB decisions per audit, {est.threads} thread(s)",
        "",
        f"{'role':<10} {'calls':>10} {'s/call':>8} {'hours':>7}  latency from",
    ]
    for r in est.roles:
        lines.append(
            f"{r.role:<10} {r.calls:>10,.1f} {r.latency_s:>8.2f} "
            f"{r.seconds / 3600:>7.2f}  {r.latency_source}"
        )
    lines += ["", f"total: {est.total_calls:,.0f} model calls, about {est.total_hours:.1f} h"]
    lines += [f"note: {n}" for n in est.notes]
    return "\n".join(lines)
