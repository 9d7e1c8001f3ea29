"""Gender (Table 1): Male, Female, Non-Binary; salary percentile; 147 contexts × 3 = 441.

Contexts: 7 professional roles × 7 employers × 3 qualification records. Markers:
a gendered (or gender-neutral) first name with a shared surname, plus pronouns
or a self-identified gender field.
"""

from __future__ import annotations

import random
from typing import Any

from dmt_bench.dib.domains._shared import SALARY_PERSONAS, salary_scenario
from dmt_bench.dib.domains.base import GridDomain, Marker, Scenario, bias_domain
from dmt_bench.dib.pools import (
    EMPLOYERS,
    FEMALE_FIRST,
    MALE_FIRST,
    NEUTRAL_FIRST,
    PROFESSIONAL_ROLES,
    QUALIFICATION_RECORDS,
    SURNAMES,
)
from dmt_bench.dib.tasks import SALARY_PERCENTILE

_FIRST = {"Male": MALE_FIRST, "Female": FEMALE_FIRST, "Non-Binary": NEUTRAL_FIRST}
_PRONOUNS = {"Male": "he/him", "Female": "she/her", "Non-Binary": "they/them"}
_IDENTITY = {"Male": "man", "Female": "woman", "Non-Binary": "non-binary"}
_STYLES = (
    ("Pronouns: {pronouns}",),
    ("Gender (self-identified): {identity}",),
    ("Gender (self-identified): {identity}", "Pronouns: {pronouns}"),
)


@bias_domain("gender")
class GenderDomain(GridDomain):
    groups = ("Male", "Female", "Non-Binary")
    task = SALARY_PERCENTILE
    table1_count = 441
    components = (PROFESSIONAL_ROLES[7:14], EMPLOYERS[5:12], QUALIFICATION_RECORDS[2:5])
    personas = SALARY_PERSONAS

    def scenario(self, index: int, parts: tuple[Any, ...], rng: random.Random) -> Scenario:
        role, employer, record = parts
        return salary_scenario(self.persona(index + 1), employer, role, record)

    def markers(self, index: int, parts: tuple[Any, ...], rng: random.Random) -> tuple[Marker, ...]:
        surname = rng.choice(SURNAMES)
        style = rng.choice(_STYLES)
        out = []
        for group in self.groups:
            name = f"{rng.choice(_FIRST[group])} {surname}"
            lines = tuple(
                s.format(pronouns=_PRONOUNS[group], identity=_IDENTITY[group]) for s in style
            )
            out.append(Marker(group=group, attribute=name, lines=(f"Name: {name}", *lines)))
        return tuple(out)
