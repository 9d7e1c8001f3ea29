"""Stimuli of the six IAT categories, loaded from package data (``data/iat/stimuli_v1.json``).

Each category has two targets (``target_a`` is the group the stereotype pairs with
``attribute_x``), each with stimuli for the implicit test and group words for the
explicit statement, and two attribute word lists. Only the primary lists are used;
the file's alternates stay documentation.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dmt_proxy.errors import ConfigError

STIMULI_VERSION = "stimuli_v1"

CategoryName = Literal["gender_career", "race", "age", "gender_science", "disability", "occupation"]
CATEGORIES: tuple[CategoryName, ...] = (
    "gender_career",
    "race",
    "age",
    "gender_science",
    "disability",
    "occupation",
)
TABLE3_ORDER: tuple[CategoryName, ...] = (
    "age",
    "disability",
    "gender_career",
    "occupation",
    "race",
    "gender_science",
)
"""Column order of the paper's Table 3."""
TABLE3_HEADERS: dict[CategoryName, str] = {
    "age": "Age",
    "disability": "Disability",
    "gender_career": "Gender Career",
    "occupation": "Gender Occup.",
    "race": "Race",
    "gender_science": "Science",
}

# The only stereotype pairing in v1; another pairing would need scoring changes.
_STEREOTYPE = "target_a~attribute_x, target_b~attribute_y"
SAMPLE_PER_TARGET = 5


class Target(BaseModel):
    """A social group: its label, words naming it, and stimuli standing for it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    label: str
    group_words: tuple[str, ...] = Field(min_length=1)
    stimuli: tuple[str, ...] = Field(min_length=SAMPLE_PER_TARGET)


class AttributeList(BaseModel):
    """One attribute pole (e.g. career) and its words."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    label: str
    words: tuple[str, ...] = Field(min_length=1)


class Category(BaseModel):
    """A stereotype category: ``target_a`` ~ ``attribute_x``, ``target_b`` ~ ``attribute_y``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: CategoryName
    target_a: Target
    target_b: Target
    attribute_x: AttributeList
    attribute_y: AttributeList
    stereotype: str

    @model_validator(mode="after")
    def _check(self) -> Category:
        if self.stereotype != _STEREOTYPE:
            raise ValueError(f"unsupported stereotype pairing {self.stereotype!r}")
        a = {s.casefold() for s in self.target_a.stimuli}
        b = {s.casefold() for s in self.target_b.stimuli}
        if a & b:
            # an overlap would make a filled mask ambiguous between the two targets
            raise ValueError(f"stimuli shared by both targets: {sorted(a & b)}")
        return self


class StimuliSet(BaseModel):
    """All categories of one stimuli version."""

    model_config = ConfigDict(frozen=True)

    version: str
    categories: dict[CategoryName, Category]

    def get(self, name: str) -> Category:
        """The category ``name``; ConfigError naming the known ones otherwise."""
        if name not in self.categories:
            known = ", ".join(self.categories)
            raise ConfigError(f"unknown IAT category {name!r}; known: {known}")
        return self.categories[name]


def _read_package_json(filename: str) -> dict[str, Any]:
    ref = resources.files("dmt_proxy").joinpath("data", "iat", filename)
    if not ref.is_file():
        raise ConfigError(f"IAT stimuli file {filename!r} is not in dmt_proxy/data/iat/")
    data: dict[str, Any] = json.loads(ref.read_text(encoding="utf-8"))
    return data


def load_stimuli(version: str = STIMULI_VERSION) -> StimuliSet:
    """Load and validate the stimuli file ``data/iat/<version>.json``."""
    raw = _read_package_json(f"{version}.json")
    categories: dict[CategoryName, Category] = {}
    for name, body in raw["categories"].items():
        categories[name] = Category.model_validate({"name": name, **body})
    missing = set(CATEGORIES) - set(categories)
    if missing:
        raise ConfigError(f"{version}: categories missing: {sorted(missing)}")
    return StimuliSet(version=version, categories=categories)


def parse_categories(values: list[str] | None) -> tuple[CategoryName, ...]:
    """Category names from the CLI (comma or space separated, ``all`` allowed)."""
    if not values:
        return CATEGORIES
    names: list[str] = []
    for value in values:
        names.extend(part.strip() for part in value.split(",") if part.strip())
    if "all" in names:
        return CATEGORIES
    aliases = {"science": "gender_science", "career": "gender_career"}
    out: list[CategoryName] = []
    for name in names:
        canon = aliases.get(name, name).replace("-", "_")
        if canon not in CATEGORIES:
            raise ConfigError(f"unknown IAT category {name!r}; known: {', '.join(CATEGORIES)}")
        if canon not in out:
            out.append(canon)
    return tuple(out)
