"""Rebuild a finished run's results from its records, with this version of the code.

No model is called: the audits, turns, stream and call log in the run directory
hold everything the results are computed from. This is how a run's report is
brought up to a newer report format (``dmt-bench report --out DIR``), e.g. to
get both readouts, the mean shift and the power line for a run made before them.
"""

from __future__ import annotations

from pathlib import Path

from dmt_bench.sim.config import SimConfig, parse_config
from dmt_bench.sim.records import AuditRecord, TurnRecord, read_audits, read_turns
from dmt_bench.sim.results import (
    CompareResults,
    arch_result,
    latency_stats,
    read_latencies,
)
from dmt_bench.sim.stream import read_stream, summarize
from dmt_bench.sim.utility import stream_utility
from dmt_proxy.errors import ConfigError


def _manifest(out: Path) -> tuple[SimConfig, float]:
    from dmt_bench.harness.rundir import MANIFEST, Manifest

    path = out / MANIFEST
    if not path.exists():
        raise ConfigError(f"{out} holds no run ({MANIFEST} is missing)")
    manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    config = parse_config(manifest.config, where=str(path))
    if manifest.digest != config.digest():
        raise ConfigError(f"{path}: its config no longer gives its digest; cannot rebuild")
    return config, manifest.elapsed_s


def rebuild_compare(out: Path, *, partial: bool = False) -> CompareResults:
    """The ``CompareResults`` of the compare run in ``out``.

    Every audit must be there, unless ``partial``: then the results hold the audits made
    so far (a run between sittings), and a ΔAGBV or MP appears only where both its
    checkpoints, and for MP the baseline's, have been audited.
    """
    from dmt_bench.sim.runner import dib_samples

    config, wall_s = _manifest(out)
    if config.kind != "compare":
        raise ConfigError(f"{out} holds a {config.kind} run; only compare runs can be rebuilt")
    streams = sorted((out / "streams").glob("*.jsonl"))
    if len(streams) != 1:
        raise ConfigError(f"{out}/streams should hold one stream, found {len(streams)}")
    samples = dib_samples(config)
    stream = read_stream(streams[0])
    archs = []
    for arch in config.memory:
        audits: dict[str, dict[int, AuditRecord]] = {
            c: read_audits(out / arch / c) for c in config.conditions
        }
        missing = [
            f"{c}@t{t}"
            for c in config.conditions
            for t in config.checkpoints()
            if t not in audits[c]
        ]
        if missing and not partial:
            raise ConfigError(f"{out}/{arch}: audits missing ({', '.join(missing)}); resume it")
        turns: dict[str, list[TurnRecord]] = {
            c: read_turns(out / arch / c) for c in config.conditions
        }
        utility = stream_utility(config.stream.source, stream, turns)
        archs.append(arch_result(config, samples, arch, audits, turns, utility))
    return CompareResults(
        name=config.name,
        digest=config.digest(),
        config=config.model_dump(mode="json"),
        turns=config.turns,
        t80=config.t80(),
        checkpoints=config.checkpoints(),
        dib_decisions=len(samples),
        stream=summarize(stream),
        archs=archs,
        latency=latency_stats(read_latencies(out / "calls.jsonl")),
        wall_s=wall_s,
    )
