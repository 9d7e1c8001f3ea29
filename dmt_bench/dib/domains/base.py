"""The bias-domain seam: a small ``Protocol``, a decorator registry and a template base.

Adding a domain is one new module in this package, named after the domain, with
one ``@bias_domain("<name>")`` class, declared under the ``dmt_proxy.dib_domains``
entry-point group in ``pyproject.toml``, plus the name in ``dmt_proxy.domains``
(the tag's bias types). Outside packages register through the same group (see
``dmt_proxy.plugins``). A domain is built with ``from_config(DomainConfig())``
and declares its contract-test config in ``contract_config()``; ``GridDomain``
gives both.

A domain builds its contexts combinatorially from component lists (a mixed-radix
grid), so its context count is exactly the product of the list lengths and its
sample count is ``contexts × groups`` (paper Table 1). Each context yields one
counterfactual set: the same scenario and record, one marker per group.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, Self, TypeVar, runtime_checkable

from dmt_bench.dib.schema import DecisionTask
from dmt_proxy.domains import DOMAINS
from dmt_proxy.plugins import Registry

ENTRY_POINT_GROUP = "dmt_proxy.dib_domains"


@dataclass(frozen=True)
class Marker:
    """The sensitive attribute as it appears in one sample of a counterfactual set."""

    group: str
    attribute: str
    """Concrete marker (``Nigerian``, ``wheelchair user``, ``age 63``)."""
    lines: tuple[str, ...]
    """Personal-details lines of the prompt; the only text that differs within a set."""


@dataclass(frozen=True)
class Scenario:
    """The shared part of one counterfactual set (persona + context c)."""

    persona: str
    setting: str
    role: str
    tasks: tuple[str, ...]
    record: tuple[str, ...]
    """Qualifications and evidence, held constant across the set."""
    subject: str = "Candidate"
    role_label: str = "Role"
    tasks_label: str = "Key responsibilities"


@dataclass(frozen=True)
class CounterfactualSet:
    """One context instantiated once per group of its domain (markers in group order)."""

    scenario: Scenario
    markers: tuple[Marker, ...]


@dataclass(frozen=True)
class DomainConfig:
    """What a domain is built from: nothing yet (a domain's grid is its own), kept so every
    plugin kind has the one factory shape ``from_config(config)``."""


@runtime_checkable
class BiasDomain(Protocol):
    """A DIB domain: its groups, its decision task and its counterfactual sets."""

    name: str
    groups: tuple[str, ...]
    task: DecisionTask
    table1_count: int
    """The domain's sample count in the paper's Table 1."""

    def context_count(self) -> int:
        """Number of contexts (counterfactual sets)."""
        ...

    def counterfactual_set(self, index: int, rng: random.Random) -> CounterfactualSet:
        """Context ``index`` with one marker per group; ``rng`` picks names and wording."""
        ...


class GridDomain:
    """Template base: contexts are the cartesian product of ``components``."""

    name: ClassVar[str]
    groups: ClassVar[tuple[str, ...]]
    task: ClassVar[DecisionTask]
    table1_count: ClassVar[int]
    components: ClassVar[tuple[Sequence[Any], ...]]
    personas: ClassVar[tuple[str, ...]]

    @classmethod
    def from_config(cls, config: DomainConfig) -> Self:
        """The domain (a grid takes no options)."""
        return cls()

    @classmethod
    def contract_config(cls) -> DomainConfig:
        """The contract checks the domain as built by default."""
        return DomainConfig()

    def context_count(self) -> int:
        """Product of the component list lengths."""
        return math.prod(len(c) for c in self.components)

    def parts(self, index: int) -> tuple[Any, ...]:
        """The components of context ``index`` (mixed radix, last component fastest)."""
        if not 0 <= index < self.context_count():
            raise IndexError(f"{self.name}: context {index} out of range")
        picked: list[Any] = []
        for comp in reversed(self.components):
            index, digit = divmod(index, len(comp))
            picked.append(comp[digit])
        return tuple(reversed(picked))

    def persona(self, index: int) -> str:
        """Persona for context ``index`` (rotates so every persona is used)."""
        return self.personas[index % len(self.personas)]

    def counterfactual_set(self, index: int, rng: random.Random) -> CounterfactualSet:
        """Build the scenario and the per-group markers of context ``index``."""
        parts = self.parts(index)
        scenario = self.scenario(index, parts, rng)
        markers = self.markers(index, parts, rng)
        if tuple(m.group for m in markers) != self.groups:
            raise AssertionError(f"{self.name}: markers must follow the group order")
        return CounterfactualSet(scenario=scenario, markers=markers)

    def scenario(self, index: int, parts: tuple[Any, ...], rng: random.Random) -> Scenario:
        """The shared scenario of context ``index``."""
        raise NotImplementedError

    def markers(self, index: int, parts: tuple[Any, ...], rng: random.Random) -> tuple[Marker, ...]:
        """One marker per group, in ``groups`` order."""
        raise NotImplementedError


def _check_domain(name: str, cls: Any) -> None:
    """Build ``cls`` and check it against the protocol and its Table 1 count."""
    if not callable(getattr(cls, "from_config", None)):
        raise TypeError(
            f"DIB domain '{name}' must be a class with a from_config(config) classmethod"
        )
    instance: Any = cls.from_config(DomainConfig())
    if not isinstance(instance, BiasDomain):
        raise TypeError(f"{cls.__name__} does not implement BiasDomain")
    if len(set(instance.groups)) != len(instance.groups):
        raise ValueError(f"domain {name}: duplicate groups")
    count = instance.context_count() * len(instance.groups)
    if count != instance.table1_count:
        raise ValueError(
            f"domain {name}: {instance.context_count()} contexts × "
            f"{len(instance.groups)} groups = {count}, Table 1 says {instance.table1_count}"
        )


DIB_DOMAINS: Registry[type[Any]] = Registry(
    "DIB domain",
    group=ENTRY_POINT_GROUP,
    check=_check_domain,
)
_T = TypeVar("_T")


def bias_domain(name: str) -> Callable[[type[_T]], type[_T]]:
    """Class decorator: check the domain's counts, then register it under ``name``."""
    return DIB_DOMAINS.register(name)


def registered_domains() -> tuple[BiasDomain, ...]:
    """All domains: Table 1 order first, then any extra domains by name."""
    order = {name: i for i, name in enumerate(DOMAINS)}
    names = sorted(DIB_DOMAINS.names(), key=lambda n: (order.get(n, len(order)), n))
    return tuple(get_domain(name) for name in names)


def get_domain(name: str) -> BiasDomain:
    """The domain registered as ``name`` (ConfigError naming the known ones if none is)."""
    domain: BiasDomain = DIB_DOMAINS.create(name, DomainConfig())
    return domain
