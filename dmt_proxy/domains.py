"""The bias domains: the one list every other list of domains is derived from.

The nine DIB domains are written once, as the ``Domain`` literal type, in the
paper's Table 1 order; ``DOMAINS`` is read from it at import time. A tag's
``bias_type`` may also be ``"other"`` (a bias outside the nine); ``BiasType`` and
``BIAS_TYPES`` add it.

Why a ``Literal`` and not a ``StrEnum``: mypy needs the names spelled out
statically either way (a functional enum built from a runtime tuple has no
members to a type checker), and a literal keeps ``bias_type`` a plain ``str``
everywhere it is stored, compared, logged or sent as JSON. Deriving the tuple
from the type, rather than the other way round, leaves exactly one hand-written
list. The tuples are typed ``tuple[str, ...]`` (``list(DOMAINS)`` is then a
``list[str]`` wherever names are handled as text); annotate a single value with
``Domain`` or ``BiasType`` where its type matters.

Derived from here: ``tags.BiasType``, the metric label set (``metrics``), the
``propertyNames`` of the policy's per-domain maps and the verdict schema's
``bias_type`` enum (both filled in when the schema files are loaded; tests keep
the files on disk equal), the bias list check (``dmt_bench/sim/bias_list.py``) and
the DIB domain modules (``dmt_bench/dib/domains/<name>.py``, one per domain). Adding
a domain: add it to ``Domain``, write its DIB module and its bias-list entry, and
the tests name anything else that is missing (auditor prompts, first-stage
prototypes).

Plain types only: this module imports nothing from the project.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

Domain = Literal[
    "race", "gender", "ses", "age", "nationality", "religion", "orientation",
    "disability", "appearance",
]  # fmt: skip
"""A DIB bias domain name."""

OTHER: Final = "other"
"""The tag's bias type for a bias outside the nine domains."""

BiasType = Literal[Domain, "other"]
"""What a tag's ``bias_type`` may be: a domain or ``"other"``."""

DOMAINS: Final[tuple[str, ...]] = get_args(Domain)
"""The nine DIB bias domains, in the paper's Table 1 order."""

BIAS_TYPES: Final[tuple[str, ...]] = (*DOMAINS, OTHER)
"""Every value a tag's ``bias_type`` may take: ``DOMAINS`` then ``"other"``."""


def check_domains(value: list[str] | None) -> list[str] | None:
    """``value`` unchanged when it is None or a non-empty list of known domains (for validators)."""
    if value is not None:
        unknown = sorted(set(value) - set(DOMAINS))
        if unknown or not value:
            raise ValueError(f"unknown DIB domain(s) {unknown}; known: {', '.join(DOMAINS)}")
    return value
