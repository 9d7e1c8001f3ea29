"""The plan of a live drift run: the compare run probed, its targets, the agent model.

See ``live`` for the whole procedure; this module only reads the run directory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dmt_bench.harness.config import ModelSpec
from dmt_bench.harness.proxy import AGENT_ALIAS, request_model
from dmt_bench.iat.probe import ProbeSettings
from dmt_bench.sim.config import CONDITION_MODE, SimConfig, parse_config
from dmt_proxy.errors import ConfigError

LIVE_VERSION = "iat_live_v1"

Point = Literal["t0", "T"]


@dataclass(frozen=True)
class CompareRun:
    """A finished ``dmt-bench compare`` run directory."""

    dir: Path
    run_id: str
    digest: str
    config: SimConfig


def load_compare_run(run_dir: Path) -> CompareRun:
    """Read ``run.json``; ConfigError unless it is a complete compare run."""
    from dmt_bench.harness.rundir import MANIFEST, Manifest

    if not run_dir.is_dir():
        raise ConfigError(f"--run {run_dir}: not a directory")
    path = run_dir / MANIFEST
    if not path.is_file():
        raise ConfigError(
            f"--run {run_dir}: no {MANIFEST}; give the --out directory of a `dmt-bench compare` run"
        )
    try:
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a dmt-bench run manifest: {exc}") from exc
    if manifest.kind != "compare":
        raise ConfigError(
            f"--run {run_dir} holds a {manifest.kind} run; iat-drift needs a compare run "
            "(conditions with and without mitigation)"
        )
    if manifest.status != "complete":
        why = f": {manifest.message}" if manifest.message else ""
        raise ConfigError(
            f"--run {run_dir}: the compare run is {manifest.status}{why}; finish it first "
            f"(`dmt-bench run --config {run_dir / 'config.yaml'} --out {run_dir} --resume`)"
        )
    config = parse_config(manifest.config, where=f"the config in {path}")
    return CompareRun(dir=run_dir, run_id=manifest.run_id, digest=manifest.digest, config=config)


def choose_arch(run: CompareRun, arch: str | None) -> str:
    """The memory architecture to probe: the given one, or the run's only one."""
    archs = run.config.memory
    if arch is None:
        if len(archs) > 1:
            raise ConfigError(
                f"the run has several memory architectures; pick one with --arch: "
                f"{', '.join(archs)}"
            )
        return archs[0]
    if arch not in archs:
        raise ConfigError(f"--arch {arch}: the run used {', '.join(archs)}")
    return arch


def choose_conditions(run: CompareRun, spec: str | None) -> tuple[str, ...]:
    """``--conditions`` (comma-separated), default baseline and dmt (those the run has)."""
    have: list[str] = list(run.config.conditions)
    if spec is None:
        return tuple([c for c in ("baseline", "dmt") if c in have] or have)
    wanted = list(dict.fromkeys(c.strip() for c in spec.split(",") if c.strip()))
    missing = [c for c in wanted if c not in have]
    if not wanted or missing:
        raise ConfigError(
            f"--conditions {spec!r}: the run has conditions {', '.join(have)}"
            + (f" (not {', '.join(missing)})" if missing else "")
        )
    return tuple(wanted)


class ProbeTarget(BaseModel):
    """One labelled probe: whose memory, in which mode, answered by which probe directory."""

    model_config = ConfigDict(frozen=True)

    label: str
    """``<condition>@t0`` or ``<condition>@T``."""
    condition: str
    point: Point
    mode: str
    user: str
    probe: str
    """Directory of the probe that answers this target (a shared t0 names another's)."""

    @property
    def shared(self) -> bool:
        """True when another target's probe answers this one (shared t0)."""
        return self.probe != probe_dir_name(self.condition, self.point)


def probe_dir_name(condition: str, point: Point) -> str:
    """Directory of one probe, e.g. ``dmt_T``."""
    return f"{condition}_{point}"


def plan_targets(
    run: CompareRun, arch: str, conditions: Sequence[str], *, share_t0: bool
) -> tuple[ProbeTarget, ...]:
    """``c@t0`` and ``c@T`` per condition, in order; t0 shared per SSP setting if asked."""
    targets: list[ProbeTarget] = []
    first_t0: dict[bool, str] = {}
    for condition in conditions:
        mode = CONDITION_MODE[condition]
        if share_t0:
            setting = "ssp" if mode.uses_ssp else "plain"
            owner = first_t0.setdefault(mode.uses_ssp, condition)
            t0_user = f"iat-t0-{run.run_id}-{arch}-{setting}"
        else:
            owner, t0_user = condition, f"iat-t0-{run.run_id}-{arch}-{condition}"
        targets.append(
            ProbeTarget(
                label=f"{condition}@t0",
                condition=condition,
                point="t0",
                mode=mode.value,
                user=t0_user,
                probe=probe_dir_name(owner, "t0"),
            )
        )
        targets.append(
            ProbeTarget(
                label=f"{condition}@T",
                condition=condition,
                point="T",
                mode=mode.value,
                user=f"sim-{run.run_id}-{arch}-{condition}",
                probe=probe_dir_name(condition, "T"),
            )
        )
    return tuple(targets)


class LiveSpec(BaseModel):
    """``live.json``: what this output directory probes (a resume must match it)."""

    model_config = ConfigDict(frozen=True)

    version: str = LIVE_VERSION
    run_dir: str
    run_id: str
    run_digest: str
    arch: str
    model: str
    """The agent model as requested from the proxy."""
    proxy: str
    """``managed`` or the URL of the running proxy."""
    settings: ProbeSettings
    targets: tuple[ProbeTarget, ...]

    def comparable(self) -> LiveSpec:
        """Without what a resumed session may change (paths, proxy URL, concurrency)."""
        return self.model_copy(
            update={
                "run_dir": "",
                "proxy": "",
                "settings": self.settings.model_copy(update={"concurrency": 0}),
            }
        )


def agent_model(config: SimConfig, model: str | None, *, external: bool) -> tuple[SimConfig, str]:
    """The config the managed proxy is built from and the model name to request.

    The default is the run's agent (as the simulation asked for it); ``model``
    replaces it in the managed proxy's policy, or is sent as given to an external one.
    """
    if model is None:
        return config, request_model(config.models.agent, AGENT_ALIAS)
    spec = ModelSpec(model=model)
    if external:
        return config, spec.model
    models = config.models.model_copy(update={"agent": spec})
    return config.model_copy(update={"models": models}), request_model(spec, AGENT_ALIAS)
