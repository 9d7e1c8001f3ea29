"""The nine-source run's matrix of content contrasts (``dose.matrix``) on a synthetic
readout: which cells it fills, the off-diagonal shares, and when it has nothing to say."""

from __future__ import annotations

import random

from dmt_bench.dose import matrix as m
from dmt_bench.dose.config import DoseConfig, parse_dose_config

CONTEXTS = 10
DOMAINS = ("age", "race")


def _cell(rng: random.Random, widen: dict[str, float]) -> dict[str, dict[str, dict[str, float]]]:
    """Each domain's contexts: groups A and B, B lower by 4 plus ``widen[domain]``, with noise."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for d in DOMAINS:
        out[d] = {}
        for i in range(CONTEXTS):
            base = 60.0 + (i % 3)
            gap = 4.0 + widen.get(d, 0.0) + rng.gauss(0, 0.5)
            out[d][f"{d}-{i:03d}"] = {"A": base, "B": base - gap}
    return out


Cells = dict[tuple[object, ...], dict[str, dict[str, dict[str, float]]]]


def _scored(age_widens: float) -> Cells:
    """Age memories widen the age gap by ``age_widens`` and race memories widen nothing."""
    rng = random.Random(3)
    return {
        (None, "empty", 0, "off", None): _cell(rng, {}),
        ("age", "biased", 10, "off", "age-1"): _cell(rng, {"age": age_widens}),
        ("race", "biased", 10, "off", "race-1"): _cell(rng, {}),
        (None, "neutral", 10, "off", "neutral-1"): _cell(rng, {}),
        (None, "neutral", 10, "off", "neutral-2"): _cell(rng, {}),
    }


def _config(**dib: object) -> DoseConfig:
    dib_section = {"domains": list(DOMAINS), **dib}
    return parse_dose_config(
        {
            "sources": ["age", "race"],
            "doses": [0, 10],
            "kinds": ["biased", "neutral"],
            "dib": dib_section,
        }
    )


def test_the_matrix_reads_each_source_against_the_neutral_sets() -> None:
    matrix = m.content_matrix(_config(), _scored(age_widens=6.0))
    assert matrix is not None
    assert (matrix.k, matrix.mode) == (10, "off")
    assert matrix.sources == ["age", "race"] and matrix.evaluated == ["age", "race"]
    by = {(c.source, c.evaluated): c for c in matrix.cells}
    assert len(by) == 4
    age = by[("age", "age")].content
    assert age.low > 0 and age.df == CONTEXTS - 1  # contexts are the clusters
    # Race memories do nothing: the interval of their contrast holds 0.
    race = by[("race", "race")].content
    assert race.low < 0 < race.high
    # Two off-diagonal cells; both shares count only finite ones.
    assert matrix.content_share.defined == 2 and matrix.delta_share.defined == 2
    assert matrix.content_share.ci_above_zero == 0


def test_the_report_lines_give_the_share_next_to_the_paper() -> None:
    lines = m.matrix_lines(m.content_matrix(_config(), _scored(age_widens=6.0)))
    text = "\n".join(lines)
    assert "| source \\ evaluated | age | race |" in text
    assert "the paper's Figure 3: 70.19 %" in text
    assert "no multiplicity correction" in text
    heat = m.heat(m.content_matrix(_config(), _scored(age_widens=6.0)))
    assert set(heat) == {"age", "race"} and heat["age"]["age"] is not None
    assert heat["age"]["age"] > 1  # GBV is the groups' spread: a gap widened by 6 adds about 3


def test_no_matrix_without_an_off_diagonal_or_controls() -> None:
    scored = _scored(age_widens=6.0)
    assert m.content_matrix(_config(targets="diagonal"), scored) is None
    one = parse_dose_config({"sources": ["age"], "doses": [0, 10], "kinds": ["biased", "neutral"]})
    assert m.content_matrix(one, scored) is None
    assert m.matrix_lines(None) == [] and m.heat(None) == {}
