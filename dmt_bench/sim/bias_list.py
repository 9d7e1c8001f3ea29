"""The bias list (paper Table 3) as versioned package data: one entry per DIB domain."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError

DEFAULT_BIAS_LIST = "bias_list_v1"


class BiasEntry(BaseModel):
    """One row of Table 3: who is targeted, with which stereotype, and how to narrate it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    domain: str
    dimension: str
    target_group: str
    non_target_group: str
    belief: str
    core_stereotype: str
    guidance: str

    @property
    def stereotype(self) -> str:
        """The template's ``Negative_Stereotype``: the belief and the core stereotype."""
        return f"Belief: {self.belief} Core Stereotype: {self.core_stereotype}"


class BiasList(BaseModel):
    """A versioned bias list covering every DIB domain exactly once."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str
    source: str
    entries: list[BiasEntry]

    @model_validator(mode="after")
    def _one_per_domain(self) -> BiasList:
        domains = [e.domain for e in self.entries]
        if sorted(domains) != sorted(DOMAINS):
            raise ValueError(f"entries must cover each of {DOMAINS} once, got {domains}")
        return self

    def for_domain(self, domain: str) -> BiasEntry:
        """The entry of ``domain`` (a DIB domain name)."""
        for entry in self.entries:
            if entry.domain == domain:
                return entry
        raise ConfigError(f"bias list {self.version} has no domain '{domain}'")


@lru_cache(maxsize=4)
def load_bias_list(version: str = DEFAULT_BIAS_LIST) -> BiasList:
    """Load ``dmt_proxy/data/bias_list/<version>.yaml`` (immutable per version)."""
    path = resources.files("dmt_proxy") / "data" / "bias_list" / f"{version}.yaml"
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"bias list '{version}' not found (expected {path})") from None
    try:
        parsed = BiasList.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"bias list {version} is invalid: {exc}") from exc
    if parsed.version != version:
        raise ConfigError(f"bias list file {version}.yaml declares version {parsed.version}")
    return parsed
