"""``dmt-bench iat-drift --run``: the IAT probe over a finished compare run's memory.

For each chosen condition of one memory architecture, the probe runs twice
through a proxy that holds the run's memory store, always with
``X-DMT-Memory: read-only`` (nothing is written) and the condition's mode:

* ``<condition>@t0``: a fresh user (``iat-t0-...``) whose memory is empty;
* ``<condition>@T``: the condition's simulated user (``sim-<run_id>-<arch>-<condition>``)
  with the memory it had at the end of the run (t = T).

At t0 memory is empty, so conditions with the same SSP setting send identical
requests (no mitigation = DMT); when the run shared its t=0 audits
(``share_t0``), they share one t0 probe here too.

The proxy is either a managed ``dmt-proxy serve`` with the run's policy (as
``dmt-bench compare`` built it) over a *copy* of ``<run>/<arch>/proxy/state`` in a
temporary directory (the run directory is never written), or, for runs made
with ``--proxy-url``, that running proxy (``proxy_url``). Output directory::

    live.json              what is probed (checked before resuming)
    <condition>_<t0|T>/    one probe each (iat_run.json, iat_trials.jsonl, iat_result.json, ...)
    proxy/                 the managed proxy's policy.yaml and proxy.log
    drift.json, drift.md   every result vs the baseline (default: the first, <first>@t0)
    live_report.json       the above, memory counts and t0 -> T per condition
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from dmt_bench.endpoint import Endpoint
from dmt_bench.harness.models import check_local_models
from dmt_bench.harness.proxy import ManagedProxy, ProxyClient
from dmt_bench.iat.live_plan import (
    CompareRun,
    LiveSpec,
    ProbeTarget,
    agent_model,
    choose_arch,
    choose_conditions,
    load_compare_run,
    plan_targets,
)
from dmt_bench.iat.live_report import (
    REPORT_FILE,
    LiveReport,
    MemoryCount,
    build_report,
    memory_count,
)
from dmt_bench.iat.probe import (
    RESULT_FILE,
    RUN_FILE,
    ProbeSettings,
    run_config,
    run_probe,
    same_run,
    write_probe,
)
from dmt_bench.iat.report import Row
from dmt_bench.iat.results import IatResult, read_result
from dmt_bench.sim.config import SimConfig
from dmt_bench.sim.proxy import sim_proxy_spec
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings

LIVE_FILE = "live.json"
# Answers do not depend on these: a resumed session may change them.
PROBE_RESUME_IGNORES = ("concurrency", "base_url")


@dataclass(frozen=True)
class LiveOptions:
    """The command-line choices of a live drift run."""

    run_dir: Path
    out: Path
    settings: ProbeSettings
    arch: str | None = None
    conditions: str | None = None
    model: str | None = None
    proxy_url: str | None = None
    resume: bool = False
    baseline: str | None = None
    timeout_s: float = 300.0
    api_key: str = "dmt-bench-iat"


def check_spec(out: Path, spec: LiveSpec, resume: bool) -> None:
    """Write ``live.json``, or check that the resumed directory probes the same thing."""
    path = out / LIVE_FILE
    if path.is_file():
        if not resume:
            raise ConfigError(
                f"{out} already holds a live drift run: pass --resume, or another --out"
            )
        earlier = LiveSpec.model_validate_json(path.read_text(encoding="utf-8"))
        if earlier.comparable() != spec.comparable():
            raise ConfigError(
                f"--resume: {out} probed something else (run {earlier.run_id}/{earlier.arch}, "
                f"model {earlier.model}, {len(earlier.targets)} targets); use another --out"
            )
    elif resume:
        raise ConfigError(f"--resume: nothing to resume in {out} ({LIVE_FILE} missing)")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(spec.model_dump_json(indent=1) + "\n", encoding="utf-8")


def finished_probe(
    probe_dir: Path, endpoint: Endpoint, settings: ProbeSettings
) -> IatResult | None:
    """The probe's result when it finished with these settings and no call errors."""
    path = probe_dir / RESULT_FILE
    if not path.is_file():
        return None
    result = read_result(path)
    expected = run_config(endpoint, settings, through_proxy=True)
    if not same_run(result.config, expected, PROBE_RESUME_IGNORES):
        raise ConfigError(f"{path} was made with other settings; use another --out")
    if any(t.outcome == "error" for t in result.trials):
        return None  # resume it: the trial log holds the answered trials
    return result


@asynccontextmanager
async def managed_proxy(
    config: SimConfig, arch: str, source: Path, out: Path
) -> AsyncIterator[ProxyClient]:
    """A ``dmt-proxy serve`` with the run's policy over a temporary copy of its state."""
    home = Path(tempfile.mkdtemp(prefix=f"dmt-iat-{arch}-"))
    proxy = ManagedProxy(sim_proxy_spec(config, arch), arch, home)
    try:
        print(f"iat-drift: copying the {arch} store from {source} ...", file=sys.stderr)
        await asyncio.to_thread(shutil.copytree, source, home / "state", symlinks=True)
        print(f"iat-drift: starting the {arch} proxy ...", file=sys.stderr)
        try:
            client = await asyncio.to_thread(proxy.start)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc}\n(the proxy log is kept in {out / 'proxy' / 'proxy.log'})"
            ) from exc
        yield client
    finally:
        await asyncio.to_thread(proxy.stop)
        # kept (also when start-up failed): the temporary home goes away
        (out / "proxy").mkdir(parents=True, exist_ok=True)
        for name in ("policy.yaml", "proxy.log"):
            if (home / name).is_file():
                shutil.copyfile(home / name, out / "proxy" / name)
        shutil.rmtree(home, ignore_errors=True)


@asynccontextmanager
async def external_proxy(url: str, admin_key_env: str) -> AsyncIterator[ProxyClient]:
    """The running proxy that holds the run's memory (runs made with ``--proxy-url``)."""
    client = ProxyClient(url.rstrip("/"), os.environ.get(admin_key_env, ""))
    if not await asyncio.to_thread(client.healthy):
        raise ConfigError(f"no healthy proxy at {url} (GET /healthz failed)")
    yield client


def state_source(run: CompareRun, arch: str) -> Path:
    """``<run>/<arch>/proxy/state``; ConfigError when the run directory lacks it."""
    state = run.dir / arch / "proxy" / "state"
    store = state / "memory" / arch
    if not store.is_dir():
        raise ConfigError(
            f"--run {run.dir}: the {arch} memory store is missing ({store}); the run's proxy "
            "state is needed (runs committed without <arch>/proxy/state cannot be probed, "
            "runs made against a running proxy need --proxy-url)"
        )
    return state


async def _memories(client: ProxyClient, user: str) -> MemoryCount | None:
    if not client.admin_key:
        return None
    return memory_count(await client.memories(user))


async def _check_proxy(
    client: ProxyClient, targets: Sequence[ProbeTarget]
) -> dict[str, MemoryCount | None]:
    """Nothing pending in the outbox, t0 users empty; memory counts per target."""
    counts: dict[str, MemoryCount | None] = {}
    if client.admin_key:
        depth = await client.outbox_depth()
        if depth:
            raise ConfigError(
                f"the proxy's outbox still holds {depth} write(s): the memory is not the "
                "run's final state (was the run stopped mid-turn?)"
            )
    else:
        print(
            "iat-drift: no admin key: memory counts and the empty-t0 check are skipped",
            file=sys.stderr,
        )
    for target in targets:
        counts[target.label] = await _memories(client, target.user)
        count = counts[target.label]
        if target.point == "t0" and count is not None and count.total:
            raise ConfigError(
                f"the t0 user {target.user} is not fresh: it has {count.total} memories"
            )
        if target.point == "T" and count is not None and count.total == 0:
            print(f"iat-drift: warning: {target.user} has no memories", file=sys.stderr)
    return counts


def _endpoint(base_url: str, target: ProbeTarget, model: str, opts: LiveOptions) -> Endpoint:
    return Endpoint(
        base_url=base_url,
        model=model,
        api_key=opts.api_key,
        user=target.user,
        memory="read-only",
        mode=target.mode,
        timeout_s=opts.timeout_s,
        concurrency=opts.settings.concurrency,
    )


@dataclass(frozen=True)
class LiveOutcome:
    """The report and the labelled results it was built from."""

    report: LiveReport
    rows: list[Row]


def _earlier_counts(out: Path) -> dict[str, MemoryCount | None]:
    """Memory counts of the session that ran the probes (none are asked when all are done)."""
    try:
        earlier = LiveReport.model_validate_json((out / REPORT_FILE).read_text(encoding="utf-8"))
    except (OSError, ValidationError):
        return {}
    return {s.target.label: s.memories for s in earlier.targets}


async def run_live(opts: LiveOptions, settings: Settings) -> LiveOutcome:
    """Probe every target (reusing finished probes) and build the drift reports.

    ``settings``: the proxy's (to check that a managed proxy's local agent model is up).
    """
    run = load_compare_run(opts.run_dir)
    arch = choose_arch(run, opts.arch)
    conditions = choose_conditions(run, opts.conditions)
    url = opts.proxy_url or run.config.execution.proxy_url
    config, model = agent_model(run.config, opts.model, external=url is not None)
    targets = plan_targets(run, arch, conditions, share_t0=run.config.share_t0)
    labels = [t.label for t in targets]
    if opts.baseline is not None and opts.baseline not in labels:
        raise ConfigError(f"--baseline {opts.baseline!r} is not one of {', '.join(labels)}")
    spec = LiveSpec(
        run_dir=str(run.dir),
        run_id=run.run_id,
        run_digest=run.digest,
        arch=arch,
        model=model,
        proxy=url or "managed",
        settings=opts.settings,
        targets=targets,
    )
    source = None if url else state_source(run, arch)
    check_spec(opts.out, spec, opts.resume)
    owners = {t.probe: t for t in targets if not t.shared}
    results: dict[str, IatResult] = {}
    for name, target in owners.items():
        # the URL of a finished probe is not compared, so none is needed here
        done = finished_probe(opts.out / name, _endpoint("", target, model, opts), opts.settings)
        if done is not None:
            results[name] = done
    counts = _earlier_counts(opts.out)
    todo = [(n, t) for n, t in owners.items() if n not in results]
    if todo:
        print(
            f"iat-drift: {len(todo)} of {len(owners)} probes to run ({arch}, model {model})",
            file=sys.stderr,
        )
        if url is None:
            # the agent must be served; the auditor is never called (nothing is written)
            check_local_models([config.models.agent], settings)
            assert source is not None
            session = managed_proxy(config, arch, source, opts.out)
        else:
            print(f"iat-drift: using the running proxy at {url}", file=sys.stderr)
            session = external_proxy(url, run.config.execution.admin_key_env)
        async with session as client:
            counts = await _check_proxy(client, targets)
            for i, (name, target) in enumerate(todo, 1):
                probe_dir = opts.out / name
                result = await run_probe(
                    _endpoint(client.base_url, target, model, opts),
                    opts.settings,
                    probe_dir,
                    through_proxy=True,
                    resume=(probe_dir / RUN_FILE).is_file(),
                    label=target.label,
                    resume_ignores=PROBE_RESUME_IGNORES,
                    prefix=f"iat[{target.label} {i}/{len(todo)}]",
                )
                write_probe(result, probe_dir, target.label)
                results[name] = result
    rows = [Row(t.label, results[t.probe]) for t in targets]
    return LiveOutcome(build_report(spec, rows, counts, opts.baseline), rows)
