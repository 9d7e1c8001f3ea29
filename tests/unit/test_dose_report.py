"""The dose report's few-cluster sections on small synthetic runs (dose-report-v2).

The primary family (content contrast in mode off, DMT's absolute reduction of it),
Holm's correction, the absolute mitigation table with MP shown as undefined where
mode off's CI holds 0, unstable contexts, and the one multiplicity statement.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dmt_bench import stats
from dmt_bench.dib.readouts import unstable_contexts
from dmt_bench.dib.scorer import DecisionResult, Method, Outcome, ScoringConfig
from dmt_bench.dose import cells as c
from dmt_bench.dose import primary, report
from dmt_bench.dose.config import parse_dose_config
from dmt_bench.dose.results import DoseResults, build_results, find_row

CONTEXTS = 8


def _record(scope: c.ScopeKey, mode: str, age_gap: list[float], shift: float) -> c.CellRecord:
    """age: groups A/B ``age_gap[i]`` apart in context i; race: no gap; all moved by ``shift``."""
    results = []
    for i, gap in enumerate(age_gap):
        base = 60.0 + shift + (i % 3)
        for domain, groups in (("age", {"A": base, "B": base - gap}),
                               ("race", {"X": base, "Y": base})):  # fmt: skip
            for group, score in groups.items():
                results.append(
                    DecisionResult(
                        sample_id=f"{domain}-{i:03d}/{group}",
                        domain=domain,
                        group=group,
                        context_id=f"{domain}-{i:03d}",
                        outcome=Outcome.SCORED,
                        method=Method.EXPECTED,
                        raw=score,
                        score=score,
                        greedy=round(score),
                    )
                )
    return c.CellRecord(scope=scope, audit=c.audit_name(scope, mode), mode=mode, user="u",
                        memories=scope.k, tagged=0, scoring=ScoringConfig(), elapsed_s=1.0,
                        results=results)  # fmt: skip


def _run(widen: float, dmt_keeps: float, neutral_in_dmt: bool) -> DoseResults:
    """Biased memories widen the age gap by ``widen`` (with context noise), neutral ones
    do not; DMT keeps ``dmt_keeps`` of the widening."""
    rng = random.Random(7)
    base_gap = [4.0 + rng.gauss(0, 0.3) for _ in range(CONTEXTS)]
    noise = [rng.gauss(0, 0.6) for _ in range(CONTEXTS)]
    noise_dmt = [rng.gauss(0, 0.6) for _ in range(CONTEXTS)]
    biased = c.ScopeKey(source="age", kind="biased", k=3)
    neutral = c.ScopeKey(source=None, kind="neutral", k=3)
    widened = [g + widen + n for g, n in zip(base_gap, noise, strict=True)]
    mitigated = [g + dmt_keeps * widen + n for g, n in zip(base_gap, noise_dmt, strict=True)]
    records = {
        c.CellKey(scope=c.EMPTY, mode="off"): _record(c.EMPTY, "off", base_gap, 0.0),
        c.CellKey(scope=c.EMPTY, mode="dmt"): _record(c.EMPTY, "dmt", base_gap, 0.0),
        c.CellKey(scope=biased, mode="off"): _record(biased, "off", widened, -3.0),
        c.CellKey(scope=biased, mode="dmt"): _record(biased, "dmt", mitigated, -3.0),
        c.CellKey(scope=neutral, mode="off"): _record(neutral, "off", base_gap, -3.0),
    }
    if neutral_in_dmt:
        records[c.CellKey(scope=neutral, mode="dmt")] = _record(neutral, "dmt", base_gap, -3.0)
    config = parse_dose_config({"sources": ["age"], "doses": [0, 3], "modes": ["off", "dmt"],
                                "neutral_modes": ["off", "dmt"] if neutral_in_dmt else ["off"],
                                "dib": {"domains": ["age", "race"], "bootstrap": 100,
                                        "permutations": 100}})  # fmt: skip
    return build_results(config, records)


def test_content_contrast_is_primary_and_holm_corrected() -> None:
    results = _run(widen=8.0, dmt_keeps=0.25, neutral_in_dmt=True)
    family = primary.primary_family(results)
    assert [f.name for f in family] == ["content age k=3", "DMT − off, content age k=3"]
    content, reduction = family
    # GBV of two groups g apart is g/2: the content contrast is about widen / 2 = 4.
    assert content.estimate.value == pytest.approx(4.0, abs=0.6)
    assert content.estimate.df == CONTEXTS - 1 and content.estimate.excludes_zero
    assert reduction.estimate.value == pytest.approx(-3.0, abs=0.6)  # 0.75 · 4 removed
    holm = stats.holm({f.name: f.estimate.p_value for f in family})
    assert [f.holm_p for f in family] == [holm[f.name].adjusted for f in family]
    assert content.reject and reduction.reject
    text = report.render_text(results)
    assert "Confirmed after Holm" in text and "content age k=3" in text
    assert "The 2 primary comparisons (content age k=3; DMT − off, content age k=3)" in text
    assert "Neutral controls were read in mode(s): dmt, off." in text


def test_without_a_neutral_control_in_dmt_its_reduction_is_not_measured() -> None:
    results = _run(widen=0.0, dmt_keeps=0.0, neutral_in_dmt=False)
    family = primary.primary_family(results)
    assert [f.name for f in family] == ["content age k=3"] and not family[0].reject
    text = report.render_text(results)
    assert "No neutral control in mode(s) dmt" in text and "not measured" in text
    assert "No primary comparison is confirmed after Holm over the 1 measured" in text
    row = find_row(results.readouts["expected"].rows, c.ScopeKey(source="age", kind="biased",
                                                                 k=3), "dmt")  # fmt: skip
    # Mode off's diagonal ΔGBV is noise around 0: MP divides by it, so it is undefined.
    assert row is not None and row.mp_defined is False
    assert primary.mp_text(row) == "undefined (off's CI holds 0)"
    assert row.vs_off_jk is not None and row.vs_off_jk.df == CONTEXTS - 1
    assert "Δ(mode) − Δ(off), diagonal" in text
    assert "Multiplicity: this report shows" in text


def test_every_mode_with_a_neutral_control_gets_its_content_contrast(tmp_path: Path) -> None:
    results = _run(widen=8.0, dmt_keeps=0.25, neutral_in_dmt=True)
    off, dmt = results.mode_contrasts
    assert (off.mode, dmt.mode) == ("off", "dmt") and off.reduction is None
    _, dmt_minus_off = primary.primary_family(results)
    # The same contrast as the primary family's, with the reduction's sign (off − dmt).
    assert off.content.value == pytest.approx(4.0, abs=0.6)
    assert dmt.reduction is not None
    assert dmt.reduction.value == pytest.approx(-dmt_minus_off.estimate.value)
    assert dmt.reduction.low == pytest.approx(-dmt_minus_off.estimate.high)
    assert dmt.content.value == pytest.approx(off.content.value - dmt.reduction.value)
    report.write_report(results, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Content contrast in every mode" in md and "| age | 3 | dmt |" in md
    assert (tmp_path / "dose_contrasts.png").stat().st_size > 0
    # Neutral controls in mode off only: nothing beyond the primary family to show.
    assert _run(widen=8.0, dmt_keeps=0.25, neutral_in_dmt=False).mode_contrasts == []


def test_an_unstable_context_is_flagged_in_the_report(tmp_path: Path) -> None:
    results = _run(widen=0.0, dmt_keeps=0.0, neutral_in_dmt=False)
    assert results.readouts["expected"].unstable == {}
    flipped = _run(widen=0.0, dmt_keeps=0.0, neutral_in_dmt=False)
    # a context answered 80 for one group and 8 (reversed: 45) for the other
    rows = flipped.readouts["expected"]
    flagged = unstable_contexts({"disability": {"disability-012": {"a": 87.5, "b": 45.0}}})
    assert flagged[0].spread == pytest.approx(42.5) and flagged[0].low_group == "b"
    changed = flipped.model_copy(
        update={"readouts": {"expected": rows.model_copy(update={"unstable": {"x/off": flagged}})}}
    )
    text = report.render_text(changed)
    assert "unstable contexts, x/off: disability-012: 45.0 (b) vs 87.5 (a), spread 42.5" in text
    report.write_report(changed, tmp_path)
    back = DoseResults.model_validate_json((tmp_path / "results.json").read_text())
    assert back.readouts["expected"].unstable["x/off"][0].context_id == "disability-012"


def test_v1_results_without_jackknife_fields_still_render() -> None:
    results = _run(widen=8.0, dmt_keeps=0.25, neutral_in_dmt=True)
    payload = results.model_dump(mode="json")
    for readout in payload["readouts"].values():
        for row in readout["rows"]:
            for key in [k for k in row if k.endswith("_jk") or k == "mp_defined"]:
                del row[key]
        del readout["unstable"]
    payload["results_version"] = "dose-results-v1"
    old = DoseResults.model_validate(payload)
    text = report.render_text(old)
    assert "No primary comparison could be measured" in text  # no jackknife: no family
    assert "age/biased" in text
