"""The cells of a dose run, and what each leaves on disk.

Run directory layout::

    run.json, config.yaml     manifest (``harness.rundir.open_run_dir``) and resolved config
    proxy/                    the managed proxy's policy, state (the seeded memories) and log
    scopes/<scope>.json       ScopeRecord: a scope's seeded memories after the outbox drained
    cells/<scope>/<mode>.json CellRecord: the DIB decisions of one scope read in one mode
    results.json, report.md, report.html, *.png

A scope is (source, kind, k): ``age-biased-k3``, ``any-neutral-k10`` (plain MMLU-Pro
controls are the same for every source), ``empty`` (k = 0). With seed sets
(``seeds.set: dose_seeds_v1``) a scope is one set at one k, named by the set:
``age-2-k10`` (stereotyped, kind ``biased``), ``neutral-1-k10``, ``age-directive-1-k10``
(the positive control, kind ``directive``). The empty scope is read
once per SSP setting (``cells/empty/plain.json``, ``cells/empty/ssp.json``): without
memories, modes that differ only in how memories are shown send identical requests.
Files are written atomically, so a killed run leaves whole records only, and a
resumed run skips what exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dmt_bench.dib.scorer import DecisionResult, ScoringConfig
from dmt_bench.dose.config import DOSE_VERSION, DoseConfig
from dmt_bench.dose.seed_sets import SeedLibrary, shipped_library
from dmt_proxy.policy import Mode

ScopeKind = Literal["biased", "neutral", "directive", "none"]


class ScopeKey(BaseModel):
    """One memory state: k memories of one kind (and source domain, where it has one)."""

    model_config = ConfigDict(frozen=True)
    source: str | None
    kind: ScopeKind
    k: int
    set: str | None = None
    """The seed set (``dose_seeds_v1``); None for ``auditor_eval_v1`` scopes and k = 0."""

    @property
    def name(self) -> str:
        """Directory and user-name part: ``age-biased-k3``, ``any-neutral-k1``, ``age-2-k10``,
        ``empty``."""
        if self.k == 0:
            return "empty"
        if self.set is not None:
            return f"{self.set}-k{self.k}"
        return f"{self.source or 'any'}-{self.kind}-k{self.k}"


EMPTY = ScopeKey(source=None, kind="none", k=0)


def audit_name(scope: ScopeKey, mode: str) -> str:
    """The file a (scope, mode) reads from: the empty scope shares one per SSP setting."""
    if scope.k == 0:
        return "ssp" if Mode(mode).uses_ssp else "plain"
    return mode


class CellKey(BaseModel):
    """One cell of the design: a scope read in a mode."""

    model_config = ConfigDict(frozen=True)
    scope: ScopeKey
    mode: str

    @property
    def audit(self) -> str:
        return audit_name(self.scope, self.mode)


class SeededMemory(BaseModel):
    """One seeded memory as the proxy stored it."""

    model_config = ConfigDict(frozen=True)
    id: str
    seed_id: str
    audit_status: str
    tag: dict[str, object] | None = None


class ScopeRecord(BaseModel):
    """A scope after seeding: who holds the memories, and how the auditor labelled them."""

    model_config = ConfigDict(frozen=True)
    dose_version: str = DOSE_VERSION
    scope: ScopeKey
    user: str
    write_mode: str
    memories: list[SeededMemory]
    drain_s: float = 0.0

    @property
    def tagged(self) -> int:
        return sum(m.audit_status in ("tagged", "quarantined") for m in self.memories)


class CellRecord(BaseModel):
    """The DIB decisions of one scope read in one mode (or, for ``empty``, one SSP setting)."""

    model_config = ConfigDict(frozen=True)
    dose_version: str = DOSE_VERSION
    scope: ScopeKey
    audit: str
    """The mode, or for the empty scope ``plain``/``ssp``."""
    mode: str
    """The mode the decisions were asked in (for ``empty``: the first mode of its setting)."""
    user: str
    memories: int
    tagged: int
    scoring: ScoringConfig
    elapsed_s: float
    results: list[DecisionResult]

    def shown_counts(self) -> list[int]:
        """How many memories the proxy showed each decision that reported it."""
        return [r.memories for r in self.results if r.memories is not None]

    def below_dose(self) -> int:
        """Decisions the proxy showed fewer than the scope's k memories."""
        return sum(1 for n in self.shown_counts() if n < self.scope.k)


def set_scopes(config: DoseConfig, library: SeedLibrary | None = None) -> list[ScopeKey]:
    """The scopes of a ``dose_seeds_v1`` design: per source its stereotyped, then its
    directive sets, then the neutral sets, each at every k > 0."""
    lib = library or shipped_library()
    out: list[ScopeKey] = []
    kinds = [kd for kd in ("biased", "directive") if kd in config.kinds]
    for source in config.sources:
        for kind in kinds:
            for set_id in config.seeds.set_ids(kind, source, lib):
                out += [
                    ScopeKey(source=source, kind=kind, k=k, set=set_id)
                    for k in config.positive_doses()
                ]
    if "neutral" in config.kinds:
        for set_id in config.seeds.set_ids("neutral", None, lib):
            out += [
                ScopeKey(source=None, kind="neutral", k=k, set=set_id)
                for k in config.positive_doses()
            ]
    return out


def scopes(config: DoseConfig) -> list[ScopeKey]:
    """Every scope of the design, in the order they are read: empty, sources, controls."""
    if config.seeds.uses_sets():
        return [EMPTY, *set_scopes(config)]
    out = [EMPTY]
    for source in config.sources:
        if "biased" in config.kinds:
            out += [ScopeKey(source=source, kind="biased", k=k) for k in config.positive_doses()]
        if "neutral" in config.kinds and config.seeds.neutral == "hard_negative":
            out += [ScopeKey(source=source, kind="neutral", k=k) for k in config.positive_doses()]
    if "neutral" in config.kinds and config.seeds.neutral == "mmlu":
        out += [ScopeKey(source=None, kind="neutral", k=k) for k in config.positive_doses()]
    return out


def cells(config: DoseConfig) -> list[CellKey]:
    """Every (scope, mode) of the design; the empty scope is listed in every mode."""
    out: list[CellKey] = []
    for scope in scopes(config):
        out += [CellKey(scope=scope, mode=m) for m in config.modes_for(scope.kind)]
    return out


def audits(config: DoseConfig) -> list[CellKey]:
    """The cells actually asked, one per file, in the order a run asks them.

    The empty scope first (once per SSP setting: every cell's baseline), then the
    largest dose of every source in every mode, its neutral control, and so on down:
    a run stopped early has the strongest contrasts of every source, not every dose
    of the first source. With seed sets, modes off and dmt come first (below).
    """
    seen: set[tuple[str, str]] = set()
    out: list[CellKey] = []
    for cell in cells(config):
        key = (cell.scope.name, cell.audit)
        if key not in seen:
            seen.add(key)
            out.append(cell)
    if config.seeds.uses_sets():
        # Seed-set designs read mode off, then dmt, for every kind before the other modes:
        # a run stopped early already holds the content contrast and DMT's reduction of it
        # (the confirmatory run's primary endpoints).
        rank = {"off": 0, "dmt": 1}
        return sorted(
            out,
            key=lambda cell: (
                cell.scope.k > 0, -cell.scope.k, rank.get(cell.mode, 2), cell.scope.kind
            ),
        )  # fmt: skip
    # sorted() is stable: within a dose and kind, sources and modes keep the config's order.
    return sorted(out, key=lambda cell: (cell.scope.k > 0, -cell.scope.k, cell.scope.kind))


def scope_path(run: Path, scope: ScopeKey) -> Path:
    return run / "scopes" / f"{scope.name}.json"


def cell_path(run: Path, cell: CellKey) -> Path:
    return run / "cells" / cell.scope.name / f"{cell.audit}.json"


def read_scope(run: Path, scope: ScopeKey) -> ScopeRecord | None:
    path = scope_path(run, scope)
    if not path.exists():
        return None
    return ScopeRecord.model_validate_json(path.read_text(encoding="utf-8"))


def read_cell(run: Path, cell: CellKey) -> CellRecord | None:
    path = cell_path(run, cell)
    if not path.exists():
        return None
    return CellRecord.model_validate_json(path.read_text(encoding="utf-8"))


def read_cells(run: Path, config: DoseConfig) -> dict[CellKey, CellRecord]:
    """Every finished cell of the design (the empty scope's under each of its modes)."""
    out: dict[CellKey, CellRecord] = {}
    for cell in cells(config):
        record = read_cell(run, cell)
        if record is not None:
            out[cell] = record
    return out
