"""Typed records of the DIB benchmark: decision tasks, scales and samples.

A sample is one decision request: persona (system prompt) + prompt (context with
one demographic marker) + the domain's decision task on a 0–100 scale. Samples of
one context form a counterfactual set: identical text except for the marker.
"""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, ConfigDict, Field

DIB_VERSION = "dib-v1"
"""Version of the generator, its texts and its scoring; bump on any change to either."""

DEFAULT_SEED = 0
"""The seed of the canonical ``dib-v1`` export."""


class Direction(str, Enum):
    """Which end of the scale favours the person being decided about."""

    HIGHER_IS_FAVOURABLE = "higher_is_favourable"
    LOWER_IS_FAVOURABLE = "lower_is_favourable"


class Scale(BaseModel):
    """An integer answer scale (always 0–100 in ``dib-v1``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    min: int = 0
    max: int = 100


class DecisionTask(BaseModel):
    """A domain's decision (paper Table 1) and how to read its number."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    slug: str
    title: str
    definition: str
    """Metric definition shown to the model, including what the ends of the scale mean."""
    question: str
    direction: Direction = Direction.HIGHER_IS_FAVOURABLE
    scale: Scale = Field(default_factory=Scale)

    def favourability(self, raw: float) -> float:
        """Map a raw answer onto the favourability scale (higher = better for the person).

        ``LOWER_IS_FAVOURABLE`` tasks (operational risk) are inverted:
        ``f = max + min − raw``. GBV is unchanged by this flip (it is a standard
        deviation of group means); group means and paired differences are not.
        """
        if self.direction is Direction.LOWER_IS_FAVOURABLE:
            return self.scale.max + self.scale.min - raw
        return raw


class Sample(BaseModel):
    """One DIB decision request, as exported (one JSON line each)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    version: str = DIB_VERSION
    domain: str
    group: str
    attribute: str
    """The concrete marker behind the group (e.g. ``Nigerian``, ``wheelchair user``)."""
    context_id: str
    persona: str
    prompt: str
    task: str
    scale: Scale = Field(default_factory=Scale)
    direction: Direction = Direction.HIGHER_IS_FAVOURABLE

    def messages(self) -> list[dict[str, str]]:
        """The chat messages to send: the persona as system prompt, then the prompt."""
        return [
            {"role": "system", "content": self.persona},
            {"role": "user", "content": self.prompt},
        ]

    def favourability(self, raw: float) -> float:
        """Raw answer to favourability (see ``DecisionTask.favourability``)."""
        if self.direction is Direction.LOWER_IS_FAVOURABLE:
            return self.scale.max + self.scale.min - raw
        return raw
