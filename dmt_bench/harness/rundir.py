"""A benchmark's run directory: its manifest (``run.json``), lock and atomic writes.

Every long benchmark (simulation, dose) writes into one directory per run::

    run.json        the manifest: protocol version, kind, config digest, run id, status
                    (running / stopped / complete), wall time so far, the config itself,
                    and each sitting's code commit, packages and input hashes (``sitting``)
    config.yaml     the resolved config (rerun it with ``dmt-bench run --config``)
    .run.lock       held by the one process working on the run (``runlock``)

An existing directory is resumed only with ``resume=True`` and the same config
digest; otherwise it is refused. Nothing in it is ever overwritten by a new run.
"""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field

from dmt_bench.harness import runlock
from dmt_bench.harness.sitting import Sitting, this_sitting
from dmt_proxy.errors import ConfigError

MANIFEST = "run.json"


class Manifest(BaseModel):
    """``run.json``: what this directory holds and how far it got."""

    model_config = ConfigDict(extra="forbid")
    sim_version: str
    """The protocol version of the benchmark that made the run (``sim-v1``; ``dose-v2``).
    The field keeps its first name so every committed manifest still loads."""
    kind: str
    name: str
    digest: str
    run_id: str
    created: str
    status: str = "running"
    message: str = ""
    elapsed_s: float = 0.0
    """Wall time of every session of this run so far."""
    config: dict[str, Any]
    sittings: list[Sitting] = Field(default_factory=list)
    """One entry per start or resume: the code and inputs it ran (empty in manifests written
    before sittings were recorded)."""


class RunConfig(Protocol):
    """What a run directory needs of an experiment config (``SimConfig``, ``DoseConfig``)."""

    @property
    def kind(self) -> str: ...

    @property
    def name(self) -> str: ...

    def digest(self) -> str: ...

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


def open_run_dir(out: Path, config: RunConfig, *, resume: bool, version: str) -> Manifest:
    """Create ``out`` for ``config`` (a run of protocol ``version``), or resume it; refuse
    anything else.

    The process then holds the directory's lock (``runlock``) until the run releases it;
    a resume waits for a stopping process to finish writing before reading its manifest.
    """
    path = out / MANIFEST
    if path.exists():
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
        if not resume:
            raise ConfigError(
                f"run directory {out} already holds a {manifest.kind} run ({manifest.status}); "
                "pass --resume to continue it, or choose another --out"
            )
        if manifest.digest != config.digest():
            old, new = manifest.config, config.model_dump(mode="json")
            changed = sorted(
                k for k in set(old) | set(new) if k != "execution" and old.get(k) != new.get(k)
            )
            raise ConfigError(
                f"cannot resume {out}: it was started with another config "
                f"(differs in: {', '.join(changed) or 'version'}); use another --out"
            )
        runlock.acquire(out)
        # Read again under the lock: a process that was stopping has now recorded its time.
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
        manifest.status, manifest.message = "running", ""
        manifest.sittings.append(this_sitting())
        write_atomic(path, manifest.model_dump_json(indent=2) + "\n")
        return manifest
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} exists and is not an empty run directory; choose another --out")
    if resume:
        raise ConfigError(f"nothing to resume: {out} holds no run")
    out.mkdir(parents=True, exist_ok=True)
    runlock.acquire(out)
    manifest = Manifest(
        sim_version=version,
        kind=config.kind,
        name=config.name,
        digest=config.digest(),
        run_id=secrets.token_hex(4),
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        config=config.model_dump(mode="json"),
        sittings=[this_sitting()],
    )
    write_atomic(path, manifest.model_dump_json(indent=2) + "\n")
    write_atomic(out / "config.yaml", yaml.safe_dump(manifest.config, sort_keys=False))
    return manifest


def set_status(
    out: Path, status: str, message: str = "", *, elapsed_s: float | None = None
) -> None:
    """Record the run's status (and cumulative wall time) in its manifest."""
    path = out / MANIFEST
    manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    manifest.status, manifest.message = status, message
    if elapsed_s is not None:
        manifest.elapsed_s = round(elapsed_s, 3)
    write_atomic(path, manifest.model_dump_json(indent=2) + "\n")


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
