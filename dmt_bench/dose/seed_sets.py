"""Hand-written seed sets for dose runs (``dmt_proxy/data/dose/*_v1.yaml``), read and checked.

The seeds of ``dose_local`` come from the labelled set ``auditor_eval_v1`` (``seeds.py``),
on whose train split the first-stage classifier was fitted. Issue #30's confirmatory
run seeds from sets written for it instead: per source domain several independent
sets of ten stereotyped memories, neutral sets of ten, and positive controls (explicit
rating rules). A set is one scope's memories at k = 10; a dose k < 10 takes the set's
first k memories in file order, so doses nest as in ``seeds.py``. Memory ids are
``<set id>-<nn>`` (1-based), e.g. ``age-2-03``.

A dose config selects them with ``seeds.set: dose_seeds_v1`` (``config.SeedConfig``):
every named set is one scope per k (``cells.ScopeKey.set``), stereotyped sets as kind
``biased``, neutral sets as ``neutral`` and directive sets as ``directive`` (the
positive control). ``SeedLibrary`` holds the three files (the shipped ones, or test
doubles of them); the config says which of their sets its scopes hold
(``config.SeedConfig.set_ids``) and checks that they fit (``config.check_seed_config``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from dmt_bench.dose.seeds import Seed
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError
from dmt_proxy.resources import data_dir

SEED_SETS_VERSION = 1
"""Version of the shipped files (``<kind>_v1.yaml``); a change to any text is a new one."""
SetKind = Literal["stereotyped", "neutral", "directive"]
SET_KINDS: tuple[SetKind, ...] = ("stereotyped", "neutral", "directive")
FILE_STEMS: dict[SetKind, str] = {
    "stereotyped": "stereotyped",
    "neutral": "neutral",
    "directive": "directives",
}
SET_SIZE = 10
"""Memories per set: the largest dose of the confirmatory design (k = 10)."""


class SeedMemory(BaseModel):
    """One memory of a set: the user's words and, for stereotyped ones, how they carry it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    text: str = Field(min_length=1)
    strategy: str | None = None
    """``frustration``, ``benevolent``, ``statistical``, ``endorsed_report``,
    ``compliment`` or ``decision`` (the auditor_eval_v2 strategies); none for neutral
    memories and directives."""


class SeedSet(BaseModel):
    """One scope's worth of memories (``SET_SIZE``), about one source domain or none."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str = Field(pattern=r"^[a-z]+(-[a-z]+)?-[0-9]+$")
    domain: str | None = None
    theme: str = ""
    disfavoured: list[str] = Field(default_factory=list)
    """DIB groups of ``domain`` the memories speak (or rule) against."""
    favoured: list[str] = Field(default_factory=list)
    points: int | None = None
    """Directives: the gap the rules ask for, on the 0-100 scale."""
    memories: list[SeedMemory]

    def memory_id(self, index: int) -> str:
        """Id of the memory at 0-based ``index``: ``<set id>-<nn>``, 1-based."""
        return f"{self.id}-{index + 1:02d}"

    def seeds(self, kind: SetKind, k: int = SET_SIZE) -> list[Seed]:
        """The set's first ``k`` memories as the dose runner's seed records."""
        if not 0 <= k <= len(self.memories):
            raise ConfigError(f"seed set {self.id} holds {len(self.memories)} memories, not {k}")
        label = "neutral" if kind == "neutral" else "biased"
        return [
            Seed(
                id=self.memory_id(i),
                text=m.text,
                domain=self.domain,
                strategy=m.strategy if kind != "directive" else "directive",
                label=label,
            )
            for i, m in enumerate(self.memories[:k])
        ]


class SeedFile(BaseModel):
    """A shipped file of seed sets, all of one kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: Literal[1]
    kind: SetKind
    sets: list[SeedSet]

    @model_validator(mode="after")
    def _shape(self) -> SeedFile:
        ids = [s.id for s in self.sets]
        if len(set(ids)) != len(ids):
            raise ValueError("set ids must be unique")
        for s in self.sets:
            if len(s.memories) != SET_SIZE:
                raise ValueError(f"set {s.id} holds {len(s.memories)} memories, not {SET_SIZE}")
            if self.kind == "neutral":
                if s.domain is not None or s.disfavoured or s.favoured:
                    raise ValueError(f"neutral set {s.id} names a domain or groups")
            elif s.domain not in DOMAINS or not s.disfavoured:
                raise ValueError(f"set {s.id} needs a DIB domain and its disfavoured groups")
            if self.kind == "directive" and s.points is None:
                raise ValueError(f"directive set {s.id} needs points")
        return self

    def by_id(self, set_id: str) -> SeedSet:
        """The set called ``set_id``; ConfigError naming the known ones otherwise."""
        for s in self.sets:
            if s.id == set_id:
                return s
        raise ConfigError(f"no {self.kind} seed set {set_id!r}; known: {', '.join(self.ids())}")

    def ids(self) -> list[str]:
        return [s.id for s in self.sets]

    def for_domain(self, domain: str | None) -> list[SeedSet]:
        """The sets of ``domain`` (``None``: the neutral sets), in file order."""
        return [s for s in self.sets if s.domain == domain]


def seed_file_path(kind: SetKind, version: int = SEED_SETS_VERSION) -> Path:
    """The shipped file of ``kind`` and ``version``."""
    return data_dir("dose") / f"{FILE_STEMS[kind]}_v{version}.yaml"


def load_seed_file(path: Path) -> SeedFile:
    """Read and validate a seed-set file; ConfigError says what is wrong."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read seed sets {path}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"seed sets {path} are not valid YAML: {exc}") from exc
    try:
        return SeedFile.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"seed sets {path} are invalid: {exc}") from None


def shipped_seed_file(kind: SetKind, version: int = SEED_SETS_VERSION) -> SeedFile:
    """The shipped seed sets of ``kind`` (``stereotyped``, ``neutral``, ``directive``)."""
    loaded = load_seed_file(seed_file_path(kind, version))
    if loaded.kind != kind:
        raise ConfigError(f"{seed_file_path(kind, version)} holds {loaded.kind} sets, not {kind}")
    return loaded


KIND_FILES: dict[str, SetKind] = {
    "biased": "stereotyped",
    "neutral": "neutral",
    "directive": "directive",
}
"""The dose scope kind each file's sets are seeded as."""


@dataclass(frozen=True)
class SeedLibrary:
    """The three seed-set files a ``dose_seeds_v1`` run seeds from."""

    stereotyped: SeedFile
    neutral: SeedFile
    directive: SeedFile

    def file(self, kind: str) -> SeedFile:
        """The file whose sets are seeded as scope kind ``kind``."""
        return {"biased": self.stereotyped, "neutral": self.neutral}.get(kind, self.directive)

    def ids_for(self, kind: str, source: str | None) -> list[str]:
        """Every set of ``kind`` (``biased``/``directive``: of ``source``), in file order."""
        domain = None if kind == "neutral" else source
        return [s.id for s in self.file(kind).for_domain(domain)]

    def seeds(self, kind: str, set_id: str, k: int) -> list[Seed]:
        """The first ``k`` memories of set ``set_id`` as seed records."""
        return self.file(kind).by_id(set_id).seeds(KIND_FILES[kind], k)


@cache
def shipped_library(version: int = SEED_SETS_VERSION) -> SeedLibrary:
    """The shipped seed sets (``dose_seeds_v1``), read once per process."""
    return SeedLibrary(
        stereotyped=shipped_seed_file("stereotyped", version),
        neutral=shipped_seed_file("neutral", version),
        directive=shipped_seed_file("directive", version),
    )
