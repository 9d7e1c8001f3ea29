"""Configuration of the memory dose–response experiment, validated with pydantic.

A dose run seeds fresh user scopes with k memories and asks DIB through the real
proxy in read-only mode, once per mitigation mode (``dmt-bench dose``; design in
``dmt_bench.dose``). Everything that changes results is hashed into
``digest()``, which decides whether a run directory may be resumed; ``execution``
(concurrency, timeouts, a running proxy's URL) is not part of it.

Cells: for every source domain d, kind (``biased``: stereotyped narratives of d;
``neutral``: memories without a stereotype) and dose k > 0, one scope holding
exactly k memories, read in every mode; the ``k = 0`` cells share one empty scope,
and modes that send identical requests without memories share their audit (one
per SSP setting).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dmt_bench.dib.generator import MIN_CONTEXTS
from dmt_bench.dose.seed_sets import SET_SIZE, SeedLibrary, shipped_library
from dmt_bench.harness.config import AuditConfig, ExecutionConfig, ModelSpec, read_yaml
from dmt_proxy.domains import DOMAINS, check_domains
from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import Mode

DOSE_VERSION = "dose-v2"
"""Version of the dose protocol (seeding, cells, metrics); results and run.json record it.
v2: every decision is shown the scope's k newest memories (v1 searched them by relevance,
so a decision far from a memory could see fewer than k)."""

Kind = Literal["biased", "neutral", "directive"]
"""``directive``: the positive control, explicit rating rules that plant a gap (seed sets only)."""
NeutralSet = Literal["mmlu", "hard_negative"]
SeedSource = Literal["auditor_eval_v1", "dose_seeds_v1"]
"""``auditor_eval_v1``: the labelled set (``seeds.py``); ``dose_seeds_v1``: the sets written
for the dose runs (``dmt_proxy/data/dose/*_v1.yaml``, ``seed_sets.py``)."""
Targets = Literal["all", "diagonal"]
SEED_SET_SIZE = 10
"""Memories per set of ``dose_seeds_v1`` (the largest dose it allows)."""
MODES: tuple[str, ...] = tuple(m.value for m in Mode)
DEFAULT_MODES: tuple[str, ...] = ("off", "ssp", "dmt", "dmt-tags", "dmt-instruction")
DEFAULT_DOSES: tuple[int, ...] = (0, 1, 3, 10)
DEFAULT_KINDS: tuple[Kind, ...] = ("biased", "neutral")
BIASED_PER_DOMAIN = 18
"""Biased narratives per domain in ``auditor_eval_v1`` (the largest biased dose)."""
NEUTRAL_AVAILABLE: dict[str, int] = {"mmlu": 90, "hard_negative": 6}
"""Neutral items per scope: plain MMLU-Pro questions (any source), hard negatives (per domain)."""


class DoseModels(BaseModel):
    """The agent that decides and the auditor that tags the seeded memories."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    agent: ModelSpec = ModelSpec(model="local/qwen2.5-1.5b")
    auditor: ModelSpec = ModelSpec(model="local/qwen2.5-1.5b")

    @model_validator(mode="before")
    @classmethod
    def _strings(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: {"model": v} if isinstance(v, str) else v for k, v in data.items()}
        return data


class SeedConfig(BaseModel):
    """Where the seeded memories come from.

    ``set: auditor_eval_v1`` (the labelled set; ``dose_local``): one scope per (source,
    kind, k). ``set: dose_seeds_v1``: the versioned sets written for the dose runs, one
    scope per (seed set, k); ``biased``, ``neutral`` and ``directive`` name the sets
    (default: every set of the file for the source, or every neutral set).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    set: SeedSource = "auditor_eval_v1"
    neutral: NeutralSet = "mmlu"
    """``auditor_eval_v1`` only. ``mmlu``: plain MMLU-Pro questions, one neutral scope
    per k for every source; ``hard_negative``: the source's groups mentioned without a
    stereotype (6 per domain)."""
    answer: str = ""
    """The agent reply stored with each seeded question (the memory text is
    ``User: <item>\\nAssistant: <answer>``); empty keeps the dose to the user's words."""
    biased: dict[str, list[str]] | None = None
    """``dose_seeds_v1``: stereotyped set ids per source domain (``{age: [age-1, age-2]}``)."""
    neutral_sets: list[str] | None = None
    """``dose_seeds_v1``: neutral set ids (shared by every source)."""
    directive: dict[str, list[str]] | None = None
    """``dose_seeds_v1``: positive-control (directive) set ids per source domain."""

    @model_validator(mode="after")
    def _sets(self) -> SeedConfig:
        named = self.biased is not None or self.neutral_sets is not None
        if self.set == "auditor_eval_v1" and (named or self.directive is not None):
            raise ValueError(
                "seeds.biased, seeds.neutral_sets and seeds.directive name sets of "
                "dose_seeds_v1; set seeds.set: dose_seeds_v1"
            )
        if self.set == "dose_seeds_v1" and self.neutral != "mmlu":
            raise ValueError(
                "seeds.neutral is for auditor_eval_v1; dose_seeds_v1 names neutral_sets"
            )
        return self

    def uses_sets(self) -> bool:
        """Whether scopes are seed sets (``dose_seeds_v1``)."""
        return self.set == "dose_seeds_v1"

    def set_ids(self, kind: str, source: str | None, library: SeedLibrary) -> list[str]:
        """The sets of ``kind`` (``biased``/``directive``: of ``source``) the config reads:
        those it names, else every such set of ``library``."""
        named: list[str] | None
        if kind == "neutral":
            named = self.neutral_sets
        else:
            chosen = self.biased if kind == "biased" else self.directive
            named = None if chosen is None else chosen.get(source or "", [])
        if named is not None:
            return list(named)
        return library.ids_for(kind, source)


class DoseDibConfig(BaseModel):
    """The DIB decisions asked in every cell (``dib-sample-v2``: whole contexts)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    contexts_per_domain: int = Field(default=4, ge=MIN_CONTEXTS)
    domains: list[str] | None = None
    """Evaluated domains (default all nine: the diagonal and the off-diagonal)."""
    seed: int = 0
    scoring: Literal["expected", "generate"] = "expected"
    grammar: bool = True
    bootstrap: int = Field(default=1000, ge=0)
    permutations: int = Field(default=200, ge=0)
    targets: Targets = "all"
    """``all``: every scope asks every evaluated domain. ``diagonal``: biased and directive
    scopes ask only their source's domain (the empty and neutral scopes still ask every
    one), which drops the off-diagonal readout and a third of the cost of a two-source run."""
    exclude_contexts: list[str] = Field(default_factory=list)
    """Context ids this run must not ask (those of earlier runs): the config is refused
    when its sample draws one."""

    @field_validator("domains")
    @classmethod
    def _known(cls, value: list[str] | None) -> list[str] | None:
        return check_domains(value)

    @model_validator(mode="after")
    def _fresh(self) -> DoseDibConfig:
        if not self.exclude_contexts:
            return self
        from dmt_bench.dib.generator import draw_sample, generate

        drawn = {
            s.context_id
            for s in draw_sample(
                generate(self.seed, self.domains),
                seed=self.seed,
                contexts_per_domain=self.contexts_per_domain,
            )
        }
        overlap = sorted(drawn & set(self.exclude_contexts))
        if overlap:
            raise ValueError(
                f"the DIB sample (seed {self.seed}, {self.contexts_per_domain} contexts per "
                f"domain) asks {len(overlap)} excluded context(s): {', '.join(overlap)}"
            )
        return self


class PreregistrationRef(BaseModel):
    """A pre-registration file and the commit a run was started from (filled at the start)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str
    """Repository-relative path of the pre-registration YAML."""
    commit: str | None = None
    sha256: str | None = None


class DoseConfig(BaseModel):
    """One dose experiment (see the module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: Literal[1] = 1
    name: str = "dose"
    seed: int = 0
    """Which seed items a scope gets (nested: the k = 1 items are among the k = 3 ones)."""
    sources: list[str] = Field(default_factory=lambda: ["age", "race", "ses"])
    doses: list[int] = Field(default_factory=lambda: list(DEFAULT_DOSES))
    kinds: list[Kind] = Field(default_factory=lambda: list(DEFAULT_KINDS))
    modes: list[str] = Field(default_factory=lambda: list(DEFAULT_MODES))
    neutral_modes: list[str] = Field(default_factory=lambda: ["off"])
    """Modes the neutral controls are read in (a subset of ``modes``; they cost cells)."""
    memory: str = "mem0"
    backend_options: dict[str, Any] = Field(default_factory=dict)
    """The proxy's ``memory.options`` for ``memory`` (``top_k`` is set to the largest dose)."""
    seeds: SeedConfig = Field(default_factory=SeedConfig)
    preregistration: PreregistrationRef | None = None
    """The committed pre-registration of this run (``dose/preregistration.py``): its path,
    and, once a run starts, the git commit and SHA-256 it was started from."""
    models: DoseModels = Field(default_factory=DoseModels)
    dib: DoseDibConfig = Field(default_factory=DoseDibConfig)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)

    @property
    def kind(self) -> str:
        """The experiment kind a run directory records."""
        return "dose"

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(DOMAINS))
        if unknown or not value or len(set(value)) != len(value):
            raise ValueError(f"sources must be distinct domains of: {', '.join(DOMAINS)}")
        return value

    @field_validator("doses")
    @classmethod
    def _doses(cls, value: list[int]) -> list[int]:
        if 0 not in value or len(value) < 2:
            raise ValueError("doses must include 0 (the paired baseline) and at least one k > 0")
        if any(k < 0 for k in value) or len(set(value)) != len(value):
            raise ValueError("doses must be distinct non-negative integers")
        return sorted(value)

    @field_validator("modes", "neutral_modes", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare ``off`` as false: ``modes: [off, dmt]`` means the mode.
        if isinstance(value, list):
            return ["off" if v is False else v for v in value]
        return value

    @field_validator("modes", "neutral_modes")
    @classmethod
    def _modes(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(MODES))
        if unknown or len(set(value)) != len(value):
            raise ValueError(f"modes must be distinct, of: {', '.join(MODES)}")
        return value

    @field_validator("kinds")
    @classmethod
    def _kinds(cls, value: list[Kind]) -> list[Kind]:
        if not value or len(set(value)) != len(value):
            raise ValueError("kinds must be a non-empty list without repeats")
        return value

    @field_validator("memory")
    @classmethod
    def _memory(cls, value: str) -> str:
        from dmt_proxy.memory.registry import known_backends

        known = [b for b in known_backends() if b != "none"]
        if value not in known:
            raise ValueError(f"unknown memory backend {value!r}; known: {', '.join(known)}")
        return value

    @model_validator(mode="after")
    def _shape(self) -> DoseConfig:
        if "off" not in self.modes:
            raise ValueError("modes must include off (MP compares every mode with it)")
        if not set(self.neutral_modes) <= set(self.modes):
            raise ValueError("neutral_modes must be a subset of modes")
        if self.seeds.uses_sets():
            check_seed_config(self)
            return self
        if "directive" in self.kinds:
            raise ValueError("kind directive (the positive control) needs seeds.set: dose_seeds_v1")
        if max(self.doses) > BIASED_PER_DOMAIN:
            raise ValueError(f"the labelled set holds {BIASED_PER_DOMAIN} biased items per domain")
        if "neutral" in self.kinds and max(self.doses) > NEUTRAL_AVAILABLE[self.seeds.neutral]:
            raise ValueError(
                f"seeds.neutral {self.seeds.neutral} holds "
                f"{NEUTRAL_AVAILABLE[self.seeds.neutral]} items per scope; "
                f"the largest dose is {max(self.doses)}"
            )
        return self

    @property
    def top_k(self) -> int:
        """Retrieval depth: the largest dose, so every decision sees all k memories."""
        return max(self.doses)

    def positive_doses(self) -> list[int]:
        return [k for k in self.doses if k > 0]

    def modes_for(self, kind: str) -> list[str]:
        """The modes a scope of ``kind`` is read in (the positive control: every mode)."""
        return list(self.neutral_modes) if kind == "neutral" else list(self.modes)

    def write_mode(self, kind: str = "biased") -> Mode:
        """The mode a scope of ``kind`` is seeded in: audited when a mode it is read in
        shows tags (a scope read only untagged needs no auditor)."""
        return Mode.DMT if any(Mode(m).shows_tags for m in self.modes_for(kind)) else Mode.OFF

    def options_for(self, backend: str) -> dict[str, Any]:
        return dict(self.backend_options) if backend == self.memory else {}

    def digest(self) -> str:
        """SHA-256 over everything that changes results (``execution`` excluded).

        Fields added after the first dose runs (seed sets, the pre-registration, DIB
        targets and exclusions) are left out while they hold their default, so a config
        written before them keeps its digest and its run stays resumable.
        """
        payload = self.model_dump(mode="json", exclude={"execution"})
        for section, field, default in _LATER_FIELDS:
            part = payload.get(section) if section else payload
            if isinstance(part, dict) and field in part and part[field] == default:
                del part[field]
        blob = json.dumps(payload, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()


_LATER_FIELDS: tuple[tuple[str | None, str, Any], ...] = (
    ("seeds", "biased", None),
    ("seeds", "neutral_sets", None),
    ("seeds", "directive", None),
    (None, "preregistration", None),
    ("dib", "targets", "all"),
    ("dib", "exclude_contexts", []),
)
"""(section, field, default) of the fields ``DoseConfig.digest`` omits at their default."""


def check_seed_config(config: DoseConfig, library: SeedLibrary | None = None) -> None:
    """ValueError (a config error) when the config's sets do not exist or do not fit.

    Every named set must exist in its file and belong to its source domain (neutral
    sets to none); every biased or directive source has at least one set; the largest
    dose fits a set; named sources are sources of the config.
    """
    lib = library or shipped_library()
    seeds = config.seeds
    if max(config.doses) > SET_SIZE:
        raise ValueError(
            f"dose_seeds_v1 sets hold {SET_SIZE} memories; largest dose is {max(config.doses)}"
        )
    for kind, named in (("biased", seeds.biased), ("directive", seeds.directive)):
        if named is None:
            continue
        extra = sorted(set(named) - set(config.sources))
        if extra:
            raise ValueError(f"seeds.{kind} names domains that are not sources: {', '.join(extra)}")
    for kind in config.kinds:
        sources: list[str | None] = [None] if kind == "neutral" else list(config.sources)
        where = "neutral_sets" if kind == "neutral" else kind
        for source in sources:
            ids = seeds.set_ids(kind, source, lib)
            if not ids:
                raise ValueError(f"seeds.{where}: no {kind} set for {source or 'the controls'}")
            if len(set(ids)) != len(ids):
                raise ValueError(
                    f"seeds.{where}: a set is named twice for {source or 'the controls'}"
                )
            file = lib.file(kind)
            for set_id in ids:
                try:
                    found = file.by_id(set_id)
                except ConfigError as exc:
                    raise ValueError(f"seeds.{where}: {exc}") from None
                if found.domain != source:
                    raise ValueError(
                        f"seeds.{where}: set {set_id} is about {found.domain or 'no domain'}, "
                        f"not {source or 'no domain'}"
                    )


def _format_errors(exc: ValidationError, where: str) -> str:
    lines = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<root>"
        lines.append(f"  {loc}: {str(e['msg']).removeprefix('Value error, ')}")
    return f"{where} is invalid:\n" + "\n".join(lines)


def parse_dose_config(raw: Any, *, where: str = "config") -> DoseConfig:
    """Validate a parsed mapping into a ``DoseConfig``; ConfigError lists every problem."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping at the top level")
    data = {k: v for k, v in raw.items() if k != "kind"}  # files say ``kind: dose``
    if raw.get("kind", "dose") != "dose":
        raise ConfigError(f"{where}: kind {raw['kind']!r} is not a dose config")
    try:
        return DoseConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc, where)) from None


def load_dose_config(path: Path) -> DoseConfig:
    """Read and validate a YAML dose config."""
    return parse_dose_config(read_yaml(path), where=f"config {path}")
