"""Run an experiment end to end: run directory, stream, proxies, LangGraph threads, results.

Run directory (``--out``)::

    run.json            manifest: config digest, run id, status (running/stopped/complete)
    config.yaml         the resolved config (``dmt-bench run --config <dir>/config.yaml``)
    streams/*.jsonl     cached question streams (+ .meta.json with their spec)
    checkpoints.sqlite  LangGraph checkpointer (one thread per memory/condition)
    calls.jsonl         every model call
    t0/                 t=0 audits shared between conditions (``share_t0``)
    <memory>/proxy/     the managed proxy's policy, state dir and log
    <memory>/<cond>/    turns.jsonl and audits/ (see ``records``)
    results.json, report.md, report.html, *.png

An existing directory is resumed only with ``resume=True`` and the same config
digest; otherwise it is refused. Nothing in it is ever overwritten by a new run.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from dmt_bench.dib.generator import draw_sample, generate
from dmt_bench.dib.schema import Sample
from dmt_bench.dib.scorer import ScoringConfig, ScoringMode
from dmt_bench.harness import runlock
from dmt_bench.harness.config import ModelSpec
from dmt_bench.harness.models import check_local_models
from dmt_bench.harness.progress import Bars
from dmt_bench.harness.proxy import AGENT_ALIAS, ManagedProxy, ProxyClient, request_model
from dmt_bench.harness.rundir import open_run_dir, set_status
from dmt_bench.mmlu import LoadedSource, load_source
from dmt_bench.sim.calllog import CallLog
from dmt_bench.sim.config import CONDITION_MODE, SIM_VERSION, SimConfig
from dmt_bench.sim.injection import BiasGenerator
from dmt_bench.sim.loop import LoopDeps, Thread, run_thread
from dmt_bench.sim.proxy import external_proxy, sim_proxy_spec
from dmt_bench.sim.records import read_audits, read_turns
from dmt_bench.sim.results import (
    CompareResults,
    HeatmapResults,
    arch_result,
    audit_contexts,
    heatmap_matrix,
    heatmap_readouts,
    latency_stats,
    read_latencies,
)
from dmt_bench.sim.stream import (
    StreamTurn,
    build_plan,
    generate_stream,
    read_stream,
    stream_spec,
    summarize,
)
from dmt_bench.sim.utility import stream_utility
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError, DmtError
from dmt_proxy.policy import Mode
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel, OwnedChatModel, UpstreamCall


def dib_samples(config: SimConfig) -> list[Sample]:
    """The DIB decisions asked at every checkpoint (same set for every condition)."""
    return draw_sample(
        generate(config.dib.seed, config.dib.domains),
        seed=config.dib.seed,
        decisions=config.dib.sample,
        contexts_per_domain=config.dib.contexts_per_domain,
        sampling=config.dib.sampling,
    )


def scoring_config(config: SimConfig) -> ScoringConfig:
    return ScoringConfig(
        mode=ScoringMode(config.dib.scoring), grammar=config.dib.grammar, seed=config.seed
    )


def generator_call(config: SimConfig, settings: Settings) -> UpstreamCall:
    """The generator's request template: its endpoint (through the factory) and sampling."""
    from dmt_proxy.upstream.factory import declared_endpoint

    spec = config.models.generator
    endpoint = declared_endpoint(
        settings, spec.model, api_base=spec.api_base, api_key_env=spec.api_key_env
    ).with_limits(
        timeout_s=config.execution.request_timeout_s, max_retries=config.execution.max_retries
    )
    params = {
        "temperature": config.injection.temperature,
        "max_tokens": config.injection.max_tokens,
    }
    return UpstreamCall(endpoint, messages=[], params=params, label=spec.model)


def generator_chat(settings: Settings) -> OwnedChatModel:
    """The chat model for the generator, built like the proxy's (the caller closes it)."""
    from dmt_proxy.upstream.factory import build_chat_model

    return build_chat_model(settings)


def needed_local_models(config: SimConfig, *, auditor: bool, generator: bool) -> list[ModelSpec]:
    """The models this process calls or whose server its proxy calls (``auditor``: DMT runs).

    With a running proxy (``execution.proxy_url``) only the generator is this process's.
    """
    specs = []
    if config.execution.proxy_url is None:
        specs.append(config.models.agent)
        if auditor:
            specs.append(config.models.auditor)
    if generator:
        specs.append(config.models.generator)
    return specs


class Experiment:
    """One run directory being executed (shared by ``compare`` and ``heatmap``)."""

    def __init__(
        self,
        config: SimConfig,
        out: Path,
        *,
        settings: Settings,
        resume: bool,
        bars: Bars,
        generator: ChatModel | None = None,
    ) -> None:
        self.config = config
        self.out = out
        self.settings = settings
        self.bars = bars
        self.manifest = open_run_dir(out, config, resume=resume, version=SIM_VERSION)
        self.samples = dib_samples(config)
        self.log = CallLog(out / "calls.jsonl", run_id=self.manifest.run_id)
        self._generator_chat = generator
        self.started = time.perf_counter()
        self.overall = -1

    def close(self) -> None:
        self.log.close()
        runlock.release(self.out)

    def needs_generator_model(self) -> bool:
        """A generator model must be reachable: rewrites are planned and none is injected."""
        return self.config.injection.rate > 0 and self._generator_chat is None

    async def streams(self, singles: Sequence[str | None]) -> dict[str | None, list[StreamTurn]]:
        """Generate or load the stream for each source (None = the config's own injection)."""
        source: LoadedSource = load_source(self.config.stream.source)
        out: dict[str | None, list[StreamTurn]] = {}
        jobs = []
        for single in singles:
            spec = stream_spec(self.config, source, single_domain=single)
            plan = build_plan(spec, source.questions)
            path = self.out / "streams" / f"{spec.mode}-{single or spec.domain or 'all'}.jsonl"
            jobs.append((single, spec, plan, path))
        todo = sum(p.inject for _, _, plan, path in jobs for p in plan[len(read_stream(path)) :])
        generator = None
        owned: OwnedChatModel | None = None
        if todo:
            call = generator_call(self.config, self.settings)
            chat = self._generator_chat
            if chat is None:
                chat = owned = generator_chat(self.settings)
            generator = BiasGenerator(
                chat,
                call,
                prompt_version=self.config.injection.prompt,
                intact_policy=self.config.injection.intact_policy,
                max_attempts=self.config.injection.max_attempts,
                log=self.log.bind(arch=None, condition="stream"),
            )
        bar = self.bars.add("bias generator (rewrites)", todo) if todo else -1
        try:
            for single, spec, plan, path in jobs:
                out[single] = await generate_stream(
                    spec,
                    plan,
                    path,
                    generator,
                    on_turn=lambda turn: self.bars.advance(bar) if turn.inject else None,
                )
        finally:
            if owned is not None:
                await owned.aclose()
        return out

    def thread(self, arch: str, condition: str, mode: Mode, label: str | None = None) -> Thread:
        name = label or condition
        return Thread(
            arch=arch,
            condition=name,
            mode=mode,
            user=f"sim-{self.manifest.run_id}-{arch}-{name}",
            dir=self.out / arch / name,
        )

    def deps(
        self, proxy: ProxyClient, stream: Sequence[StreamTurn], thread: Thread, bar: int
    ) -> LoopDeps:
        c = self.config

        def advance(n: int) -> None:
            self.bars.advance(bar, n)
            self.bars.advance(self.overall, n)

        t0 = None
        if c.share_t0:
            t0 = self.out / "t0" / ("ssp.json" if thread.mode.uses_ssp else "plain.json")
        return LoopDeps(
            proxy=proxy,
            model=request_model(c.models.agent, AGENT_ALIAS),
            stream=stream,
            checkpoints=c.checkpoints(),
            samples=self.samples,
            scoring=scoring_config(c),
            log=self.log.bind(arch=thread.arch, condition=thread.condition),
            max_tokens=c.agent.max_tokens,
            temperature=c.agent.temperature,
            seed=c.seed,
            dib_concurrency=c.execution.dib_concurrency,
            request_timeout_s=c.execution.request_timeout_s,
            max_retries=c.execution.max_retries,
            drain_timeout_s=c.execution.drain_timeout_s,
            t0_cache=t0,
            advance=advance,
        )

    def start_overall(self, threads: Sequence[Thread]) -> None:
        """One bar over every thread of the run (its ETA is the run's)."""
        total = self.total_units() * len(threads)
        done = sum(self.done_units(th) for th in threads)
        if done < total:
            self.overall = self.bars.add("all conditions", total, done)

    def done_units(self, thread: Thread) -> int:
        return len(read_turns(thread.dir)) + len(read_audits(thread.dir)) * len(self.samples)

    def total_units(self) -> int:
        return self.config.turns + len(self.config.checkpoints()) * len(self.samples)

    async def run_threads(
        self, arch: str, items: Sequence[tuple[Thread, Sequence[StreamTurn]]]
    ) -> None:
        """Run every unfinished thread of one memory architecture through its proxy."""
        from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

        todo = [(th, s) for th, s in items if self.done_units(th) < self.total_units()]
        if not todo:
            return
        managed: ManagedProxy | None = None
        if self.config.execution.proxy_url:
            client = external_proxy(self.config)
        else:
            self.bars.note(f"starting the {arch} proxy ...")
            managed = ManagedProxy(
                sim_proxy_spec(self.config, arch), arch, self.out / arch / "proxy"
            )
            client = managed.start()
        try:
            async with AsyncSqliteSaver.from_conn_string(
                str(self.out / "checkpoints.sqlite")
            ) as saver:
                for thread, stream in todo:
                    bar = self.bars.add(
                        f"{arch}/{thread.condition}", self.total_units(), self.done_units(thread)
                    )
                    await run_thread(thread, self.deps(client, stream, thread, bar), saver)
        finally:
            if managed is not None:
                managed.stop()

    def wall_s(self) -> float:
        """Wall time of this run over all its sessions."""
        return self.manifest.elapsed_s + time.perf_counter() - self.started

    def finish(self, status: str, message: str = "") -> None:
        set_status(self.out, status, message, elapsed_s=self.wall_s())

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Mark the run complete when the block ends, stopped (resumable) when it fails."""
        try:
            yield
            self.finish("complete")
        except (DmtError, KeyboardInterrupt, asyncio.CancelledError) as exc:
            self.finish("stopped", str(exc) or type(exc).__name__)
            raise
        finally:
            self.close()


async def run_compare(
    config: SimConfig,
    out: Path,
    *,
    settings: Settings,
    resume: bool = False,
    bars: Bars | None = None,
    generator: ChatModel | None = None,
) -> CompareResults:
    """Every condition × memory architecture on one shared stream; ΔAGBV and MP."""
    bars = bars or Bars(enabled=False)
    exp = Experiment(config, out, settings=settings, resume=resume, bars=bars, generator=generator)
    with exp.running():
        dmt = any(CONDITION_MODE[c].audits_writes for c in config.conditions)
        models = needed_local_models(config, auditor=dmt, generator=exp.needs_generator_model())
        check_local_models(models, settings)
        stream = (await exp.streams([None]))[None]
        exp.start_overall(
            [exp.thread(a, c, CONDITION_MODE[c]) for a in config.memory for c in config.conditions]
        )
        for arch in config.memory:
            threads = [exp.thread(arch, c, CONDITION_MODE[c]) for c in config.conditions]
            await exp.run_threads(arch, [(th, stream) for th in threads])
        archs = []
        for arch in config.memory:
            audits: dict[str, Any] = {c: read_audits(out / arch / c) for c in config.conditions}
            turns: dict[str, Any] = {c: read_turns(out / arch / c) for c in config.conditions}
            utility = stream_utility(config.stream.source, stream, turns)
            archs.append(arch_result(config, exp.samples, arch, audits, turns, utility))
        results = CompareResults(
            name=config.name,
            digest=config.digest(),
            config=config.model_dump(mode="json"),
            turns=config.turns,
            t80=config.t80(),
            checkpoints=config.checkpoints(),
            dib_decisions=len(exp.samples),
            stream=summarize(stream),
            archs=archs,
            latency=latency_stats(read_latencies(out / "calls.jsonl")),
            wall_s=exp.wall_s(),
        )
        return results


async def run_heatmap(
    config: SimConfig,
    out: Path,
    *,
    settings: Settings,
    resume: bool = False,
    bars: Bars | None = None,
    generator: ChatModel | None = None,
) -> HeatmapResults:
    """Single-source injection from each source domain, no mitigation; ΔGBV matrix at t80."""
    if len(config.memory) != 1:
        raise ConfigError("heatmap runs one memory architecture; give exactly one")
    bars = bars or Bars(enabled=False)
    exp = Experiment(config, out, settings=settings, resume=resume, bars=bars, generator=generator)
    with exp.running():
        arch = config.memory[0]
        models = needed_local_models(config, auditor=False, generator=exp.needs_generator_model())
        check_local_models(models, settings)
        streams = await exp.streams(list(config.heatmap_sources))
        items = [
            (exp.thread(arch, "baseline", Mode.OFF, label=f"src-{s}"), streams[s])
            for s in config.heatmap_sources
        ]
        exp.start_overall([th for th, _ in items])
        await exp.run_threads(arch, items)
        audits = {s: read_audits(out / arch / f"src-{s}") for s in config.heatmap_sources}
        t = config.t80()
        matrix = heatmap_matrix(t, audits)
        from dmt_bench.paired import positive_off_diagonal

        finite = {s: {d: v for d, v in row.items() if v is not None} for s, row in matrix.items()}
        positive, total = positive_off_diagonal(finite)
        domains = [d for d in DOMAINS if any(d in row for row in matrix.values())]
        results = HeatmapResults(
            name=config.name,
            digest=config.digest(),
            config=config.model_dump(mode="json"),
            memory=arch,
            t=t,
            sources=list(config.heatmap_sources),
            domains=domains,
            matrix=matrix,
            positive_off_diagonal=positive,
            finite_off_diagonal=total,
            fraction_positive=positive / total if total else None,
            streams={s: summarize(streams[s]) for s in config.heatmap_sources},
            latency=latency_stats(read_latencies(out / "calls.jsonl")),
            wall_s=exp.wall_s(),
            readouts=heatmap_readouts(config, t, audits),
            contexts=audit_contexts(audits),
        )
        return results
