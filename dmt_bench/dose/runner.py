"""Run a dose experiment: seed the scopes through the proxy, then read every cell.

1. Seeding. Every scope of the design (``cells.scopes``) is a fresh user of the
   proxy. Its k seed memories go in through ``POST /v1/memories`` (never through
   the agent, so no reply of the agent enters the memory text), in mode ``dmt``
   when any mode shows tags (so the auditor tags them like any write), else
   ``off``. After the outbox drains, the scope's memories and audit states are
   recorded (``scopes/<scope>.json``). Seeding is idempotent: a resumed run adds
   only the seeds a scope does not hold yet.
2. Reading. Every cell asks the same DIB sample through the proxy as the scope's
   user with ``X-DMT-Memory: read-only`` and the cell's ``X-DMT-Mode``; the proxy's
   ``top_k`` is the largest dose, so every decision sees all k memories. Cells are
   written atomically; decisions that end in transport errors are retried, then
   the run stops, resumable.

A managed proxy (the default) lives in ``<run>/proxy`` with its state, so a
resumed run finds its seeded memories again; with ``execution.proxy_url`` a
running proxy is used instead (scopes are named by the run id, so they are new).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.dib.generator import draw_sample, generate
from dmt_bench.dib.runner import run_with_retries
from dmt_bench.dib.schema import Sample
from dmt_bench.dib.scorer import DecisionResult, Outcome, ScoringConfig, ScoringMode
from dmt_bench.dose import cells as c
from dmt_bench.dose.config import DOSE_VERSION, DoseConfig
from dmt_bench.dose.seed_sets import SeedLibrary, shipped_library
from dmt_bench.dose.seeds import Seed, seeds_for
from dmt_bench.endpoint import Endpoint
from dmt_bench.harness import runlock
from dmt_bench.harness.config import ModelSpec
from dmt_bench.harness.models import check_local_models
from dmt_bench.harness.proxy import (
    AGENT_ALIAS,
    ManagedProxy,
    ProxyClient,
    ProxySpec,
    connect_proxy,
    request_model,
    run_policy,
)
from dmt_bench.harness.rundir import Manifest, open_run_dir, set_status, write_atomic
from dmt_bench.harness.sitting import nonce_key
from dmt_proxy.errors import ConfigError, DmtError, RunInterrupted
from dmt_proxy.memory.base import interaction_text
from dmt_proxy.settings import Settings

DIB_RETRIES = 2
"""Extra rounds for DIB decisions that ended in a transport error."""


class DoseStopped(RunInterrupted):
    """Decisions kept failing after retries; the run can be resumed."""


def dose_samples(config: DoseConfig) -> list[Sample]:
    """The DIB decisions every cell asks (whole contexts, ``dib-sample-v2``)."""
    return draw_sample(
        generate(config.dib.seed, config.dib.domains),
        seed=config.dib.seed,
        contexts_per_domain=config.dib.contexts_per_domain,
    )


def scope_samples(config: DoseConfig, scope: c.ScopeKey, samples: Sequence[Sample]) -> list[Sample]:
    """The decisions a scope's cells ask: every sampled one, or with ``dib.targets:
    diagonal`` only its source's domain for biased and directive scopes."""
    if config.dib.targets == "diagonal" and scope.kind in ("biased", "directive"):
        return [s for s in samples if s.domain == scope.source]
    return list(samples)


def scoring_config(config: DoseConfig) -> ScoringConfig:
    return ScoringConfig(
        mode=ScoringMode(config.dib.scoring), grammar=config.dib.grammar, seed=config.seed
    )


def dose_policy(config: DoseConfig) -> dict[str, Any]:
    """The proxy policy: every memory shown to every decision (the ``top_k`` = largest dose
    newest), the auditor, aliases."""
    # The k newest memories, not the k most relevant: a search would leave out memories
    # far from a question (mem0 drops hits whose cosine is under its threshold, and cannot
    # go below 0), so the dose would vary by question, and so would the rendered block
    # (no prefix-cache reuse across a cell).
    memory: dict[str, Any] = {
        "backend": config.memory,
        "top_k": config.top_k,
        "retrieval": "recent",
    }
    if config.backend_options:
        memory["options"] = dict(config.backend_options)
    return run_policy(f"dose-{config.memory}", config.models, config.audit, memory)


class Progress:
    """One line per step on a stream, with the rate and the time left at this session's rate."""

    def __init__(self, stream: TextIO | None, total: int, done: int) -> None:
        self.stream = stream
        self.total, self.done = total, done
        self.session = 0
        self.started = time.perf_counter()

    def note(self, message: str) -> None:
        if self.stream is not None:
            print(f"dose: {message}", file=self.stream, flush=True)

    def cell(self, label: str, decisions: int, seconds: float) -> None:
        self.done += decisions
        self.session += decisions
        elapsed = time.perf_counter() - self.started
        rate = self.session / elapsed if elapsed > 0 else 0.0
        left = (self.total - self.done) / rate / 3600 if rate > 0 else float("nan")
        self.note(
            f"{label}: {decisions} decisions in {seconds / 60:.1f} min; "
            f"{self.done}/{self.total} done, {rate:.2f} decisions/s, about {left:.1f} h left"
        )


class DoseRun:
    """One dose run directory being executed."""

    def __init__(
        self,
        config: DoseConfig,
        out: Path,
        *,
        resume: bool,
        progress: TextIO | None = sys.stderr,
        items: Sequence[EvalItem] | None = None,
        library: SeedLibrary | None = None,
    ) -> None:
        """``items``: the labelled set to seed from (default: the shipped one; tests);
        ``library``: the seed sets of a ``dose_seeds_v1`` run (default: the shipped ones)."""
        ref = config.preregistration
        if ref is not None and (ref.commit is None or ref.sha256 is None):
            raise ConfigError(
                f"pre-registration {ref.path} is not resolved to a commit "
                "(dmt-bench dose does it: preregistration.resolve)"
            )
        self.config = config
        self.out = out
        self.manifest: Manifest = open_run_dir(out, config, resume=resume, version=DOSE_VERSION)
        self.samples = dose_samples(config)
        self.items = items
        self.library = library
        todo = [a for a in c.audits(config) if c.read_cell(out, a) is None]
        total = sum(len(self.samples_for(a.scope)) for a in c.audits(config))
        left = sum(len(self.samples_for(a.scope)) for a in todo)
        self.progress = Progress(progress, total, total - left)
        self.todo = todo
        self.started = time.perf_counter()

    def user(self, scope: c.ScopeKey) -> str:
        return f"dose-{self.manifest.run_id}-{scope.name}"

    def samples_for(self, scope: c.ScopeKey) -> list[Sample]:
        """The DIB decisions the scope's cells ask (``scope_samples``)."""
        return scope_samples(self.config, scope, self.samples)

    def seeds(self, scope: c.ScopeKey) -> list[Seed]:
        if scope.k == 0:
            return []
        if scope.set is not None:
            return (self.library or shipped_library()).seeds(scope.kind, scope.set, scope.k)
        return seeds_for(
            scope.kind,
            scope.source,
            scope.k,
            seed=self.config.seed,
            neutral=self.config.seeds.neutral,
            items=self.items,
        )

    async def seed_all(self, proxy: ProxyClient) -> dict[str, c.ScopeRecord]:
        """Seed every scope not recorded yet; every scope's record."""
        answer = self.config.seeds.answer
        pending: list[tuple[c.ScopeKey, list[Seed]]] = []
        records: dict[str, c.ScopeRecord] = {}
        for scope in c.scopes(self.config):
            record = c.read_scope(self.out, scope)
            if record is not None:
                records[scope.name] = record
                continue
            seeds = self.seeds(scope)
            held = {str(m["text"]) for m in await proxy.memories(self.user(scope))}
            wanted = {interaction_text(s.text, answer) for s in seeds}
            if held - wanted:
                raise ConfigError(
                    f"user {self.user(scope)} holds memories that are not its seeds; "
                    "use a new run directory"
                )
            missing = [s for s in seeds if interaction_text(s.text, answer) not in held]
            mode = self.config.write_mode(scope.kind)
            for s in missing:  # in seed order, so creation order (the block's order) is fixed
                await proxy.add_memory(self.user(scope), s.text, answer=answer, mode=mode.value)
            pending.append((scope, seeds))
        if not pending:
            return records
        writes = sum(len(s) for _, s in pending)
        self.progress.note(f"seeding {len(pending)} scope(s), {writes} memories")
        drain = await proxy.wait_drained(self.config.execution.drain_timeout_s)
        for scope, seeds in pending:
            by_text = {interaction_text(s.text, answer): s.id for s in seeds}
            stored = await proxy.memories(self.user(scope))
            memories = [
                c.SeededMemory(
                    id=str(m["id"]),
                    seed_id=by_text[str(m["text"])],
                    audit_status=str(m["audit_status"]),
                    tag=m.get("tag"),
                )
                for m in stored
            ]
            if len(memories) != scope.k:
                raise ConfigError(
                    f"{self.user(scope)} holds {len(memories)} memories, not {scope.k}"
                )
            record = c.ScopeRecord(
                scope=scope,
                user=self.user(scope),
                write_mode=self.config.write_mode(scope.kind).value,
                memories=memories,
                drain_s=round(drain, 3),
            )
            write_atomic(c.scope_path(self.out, scope), record.model_dump_json(indent=1))
            records[scope.name] = record
            statuses = sorted({m.audit_status for m in memories})
            self.progress.note(
                f"{scope.name}: {len(memories)} memories ({record.tagged} tagged; {statuses})"
            )
        return records

    async def read(self, proxy: ProxyClient, cell: c.CellKey, scope: c.ScopeRecord | None) -> None:
        """Ask the DIB sample as the cell's scope user in the cell's mode; write the cell."""
        user = scope.user if scope is not None else self.user(cell.scope)
        held = await proxy.memories(user)
        if len(held) != cell.scope.k:
            raise ConfigError(f"{user} holds {len(held)} memories, expected {cell.scope.k}")
        ex = self.config.execution
        endpoint = Endpoint(
            base_url=proxy.base_url,
            model=request_model(self.config.models.agent, AGENT_ALIAS),
            api_key="dmt-bench-dose",
            user=user,
            memory="read-only",
            mode=cell.mode,
            timeout_s=ex.request_timeout_s,
            concurrency=ex.dib_concurrency,
        )
        started = time.perf_counter()
        results, scoring = await self._decide(endpoint, self.samples_for(cell.scope))
        elapsed = time.perf_counter() - started
        record = c.CellRecord(
            scope=cell.scope,
            audit=cell.audit,
            mode=cell.mode,
            user=user,
            memories=len(held),
            tagged=scope.tagged if scope is not None else 0,
            scoring=scoring,
            elapsed_s=round(elapsed, 3),
            results=results,
        )
        write_atomic(c.cell_path(self.out, cell), record.model_dump_json())
        short = record.below_dose()
        if short:
            self.progress.note(
                f"warning: {short} of {len(results)} decisions in {cell.scope.name} "
                f"{cell.audit} saw fewer than {cell.scope.k} memories"
            )
        self.progress.cell(f"{cell.scope.name} {cell.audit}", len(results), elapsed)

    async def _decide(
        self, endpoint: Endpoint, samples: Sequence[Sample]
    ) -> tuple[list[DecisionResult], ScoringConfig]:
        client = endpoint.client()
        try:
            results, scoring = await run_with_retries(
                samples, endpoint, scoring_config(self.config), client=client,
                retries=DIB_RETRIES,
            )  # fmt: skip
        finally:
            await client.close()
        errors = [r for r in results if r.outcome is Outcome.ERROR]
        if errors:
            raise DoseStopped(
                f"{len(errors)} DIB decision(s) failed after {DIB_RETRIES} retries "
                f"(first: {errors[0].reason})",
                upstream=endpoint.base_url,
            )
        return results, scoring

    async def execute(self, proxy: ProxyClient) -> None:
        """Seed what is not seeded, then read every cell not read yet."""
        records = await self.seed_all(proxy)
        for cell in self.todo:
            await self.read(proxy, cell, records.get(cell.scope.name))

    def wall_s(self) -> float:
        return self.manifest.elapsed_s + time.perf_counter() - self.started

    def finish(self, status: str, message: str = "") -> None:
        set_status(self.out, status, message, elapsed_s=self.wall_s())


def needed_local_models(config: DoseConfig) -> list[ModelSpec]:
    """The models the run's own proxy calls: the agent, and the auditor when writes are audited.

    None with a running proxy (``execution.proxy_url``): it brings its own.
    """
    if config.execution.proxy_url is not None:
        return []
    specs = [config.models.agent]
    if any(config.write_mode(kind).audits_writes for kind in config.kinds):
        specs.append(config.models.auditor)
    return specs


def external_proxy(config: DoseConfig) -> ProxyClient:
    """A client for ``execution.proxy_url`` with the admin key from its env variable."""
    url = config.execution.proxy_url
    assert url is not None
    return connect_proxy(url, config.execution.admin_key_env, "seeding uses POST /v1/memories")


async def run_dose(
    config: DoseConfig,
    out: Path,
    *,
    settings: Settings,
    resume: bool = False,
    progress: TextIO | None = sys.stderr,
    items: Sequence[EvalItem] | None = None,
    library: SeedLibrary | None = None,
) -> DoseRun:
    """Run (or resume) ``config`` in ``out``; the finished run (results: ``results.build``)."""
    run = DoseRun(config, out, resume=resume, progress=progress, items=items, library=library)
    managed: ManagedProxy | None = None
    try:
        if run.todo or any(c.read_scope(out, s) is None for s in c.scopes(config)):
            check_local_models(needed_local_models(config), settings)
            if config.execution.proxy_url:
                client = external_proxy(config)
            else:
                run.progress.note(f"starting the {config.memory} proxy ...")
                spec = ProxySpec(
                    policy=dose_policy(config),
                    request_timeout_s=config.execution.request_timeout_s,
                    start_timeout_s=config.execution.proxy_start_timeout_s,
                    nonce_key=nonce_key(config.digest()),
                )
                managed = ManagedProxy(spec, config.memory, out / "proxy")
                client = await asyncio.to_thread(managed.start)
            await run.execute(client)
        run.finish("complete")
    except (DmtError, KeyboardInterrupt, asyncio.CancelledError) as exc:
        run.finish("stopped", str(exc) or type(exc).__name__)
        raise
    finally:
        if managed is not None:
            await asyncio.to_thread(managed.stop)
        runlock.release(out)  # only now: its proxy has let go of the store
    return run
