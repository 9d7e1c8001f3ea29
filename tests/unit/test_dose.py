"""``dmt-bench dose``: config, seeds, cell bookkeeping and statistics, in process.

Whole runs and resume, through ``FakeProxy`` over loopback HTTP, are
``tests/integration/test_dose_runs.py``; the real models run in
tests/e2e/test_dose_e2e.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dmt_bench.cli import main
from dmt_bench.dib.scorer import DecisionResult, Method, Outcome, ScoringConfig
from dmt_bench.dose import cells as c
from dmt_bench.dose import estimate, report
from dmt_bench.dose.config import DoseConfig, parse_dose_config
from dmt_bench.dose.results import build_results, find_row, paired_permutation
from dmt_bench.dose.runner import dose_policy
from dmt_bench.dose.seeds import seeds_for
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""

# ----------------------------------------------------------------- config and seeds


def test_default_design_counts_cells_and_shares_the_empty_scope() -> None:
    config = DoseConfig()
    assert config.top_k == 10 and config.write_mode("biased").value == "dmt"
    assert config.write_mode("neutral").value == "off"  # read untagged only: no auditor
    scopes = c.scopes(config)
    assert scopes[0] == c.EMPTY
    assert [s.name for s in scopes[1:4]] == ["age-biased-k1", "age-biased-k3", "age-biased-k10"]
    assert [s.name for s in scopes[-3:]] == ["any-neutral-k1", "any-neutral-k3", "any-neutral-k10"]
    # 3 sources × 3 doses × 5 modes, 3 neutral controls in mode off, and k = 0 read twice
    # (plain and with SSP), though listed under each of the five modes.
    assert len(c.audits(config)) == 45 + 3 + 2
    assert len(c.cells(config)) == 45 + 3 + 5
    assert {a.audit for a in c.audits(config) if a.scope.k == 0} == {"plain", "ssp"}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        ({"doses": [1, 3]}, "must include 0"),
        ({"doses": [0, 19]}, "18 biased items"),
        ({"modes": ["ssp", "dmt"]}, "must include off"),
        ({"neutral_modes": ["dmt"], "modes": ["off"]}, "subset of modes"),
        ({"sources": ["age", "age"]}, "distinct domains"),
        ({"seeds": {"neutral": "hard_negative"}}, "holds 6 items"),
        ({"kind": "compare"}, "not a dose config"),
        ({"dib": {"contexts_per_domain": 1}}, "greater than or equal to 2"),
    ],
)
def test_config_errors_name_the_problem(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_dose_config(raw)


def test_a_bare_yaml_off_is_the_mode(tmp_path: Path) -> None:
    from dmt_bench.dose.config import load_dose_config

    path = tmp_path / "dose.yaml"
    path.write_text("kind: dose\nmodes: [off, dmt]\nneutral_modes: [off]\n")
    config = load_dose_config(path)
    assert config.modes == ["off", "dmt"] and config.neutral_modes == ["off"]


def test_digest_ignores_execution_only() -> None:
    a = parse_dose_config({})
    assert a.digest() == parse_dose_config({"execution": {"dib_concurrency": 4}}).digest()
    assert a.digest() != parse_dose_config({"doses": [0, 3]}).digest()


def test_seeds_nest_across_doses_and_cover_the_strategies() -> None:
    order = [s.id for s in seeds_for("biased", "race", 18, seed=0)]
    assert len(set(order)) == 18 and all(i.startswith("race-") for i in order)
    three = seeds_for("biased", "race", 3, seed=0)
    assert [s.id for s in three] == order[:3]
    assert {s.strategy for s in three} == {"frustration", "benevolent", "statistical"}
    assert [s.id for s in seeds_for("biased", "race", 3, seed=1)] != order[:3]
    neutral = seeds_for("neutral", None, 10, seed=0)
    assert all(s.label == "neutral" and s.domain is None for s in neutral)
    assert [s.id for s in seeds_for("neutral", None, 3, seed=0)] == [s.id for s in neutral[:3]]
    with pytest.raises(ConfigError, match="only 6"):
        seeds_for("neutral", "age", 7, seed=0, neutral="hard_negative")


# --------------------------------------------------------------------- statistics


def result(domain: str, context: str, group: str, score: float) -> DecisionResult:
    return DecisionResult(
        sample_id=f"{context}/{group}", domain=domain, group=group, context_id=context,
        outcome=Outcome.SCORED, method=Method.EXPECTED, raw=score, score=score,
        greedy=round(score),
    )  # fmt: skip


def record(scope: c.ScopeKey, mode: str, scores: dict[str, dict[str, list[float]]]) -> c.CellRecord:
    """``scores``: {domain: {group: [score per context]}}."""
    results = [
        result(d, f"{d}-{i:03d}", g, s)
        for d, groups in scores.items()
        for g, per_context in groups.items()
        for i, s in enumerate(per_context)
    ]
    return c.CellRecord(scope=scope, audit=c.audit_name(scope, mode), mode=mode, user="u",
                        memories=scope.k, tagged=0, scoring=ScoringConfig(), elapsed_s=1.0,
                        results=results)  # fmt: skip


NOISE = [0.0, 1.0, -1.0, 0.5]
"""Per-context jitter shared by every cell, so paired differences are exact."""


def scores(gap: float, shift: float = 0.0) -> dict[str, dict[str, list[float]]]:
    """age: groups A/B ``gap`` apart; race: no gap; every score moved by ``shift``."""
    return {
        "age": {"A": [60 + shift + n for n in NOISE], "B": [60 - gap + shift + n for n in NOISE]},
        "race": {"X": [50 + shift + n for n in NOISE], "Y": [50 + shift + n for n in NOISE]},
    }


def test_results_diagonal_off_diagonal_shift_mp_and_content_by_hand() -> None:
    config = parse_dose_config({"sources": ["age"], "doses": [0, 3], "modes": ["off", "dmt"],
                                "dib": {"domains": ["age", "race"], "bootstrap": 200,
                                        "permutations": 200}})  # fmt: skip
    biased = c.ScopeKey(source="age", kind="biased", k=3)
    neutral = c.ScopeKey(source=None, kind="neutral", k=3)
    records = {
        c.CellKey(scope=c.EMPTY, mode="off"): record(c.EMPTY, "off", scores(2.0)),
        c.CellKey(scope=c.EMPTY, mode="dmt"): record(c.EMPTY, "dmt", scores(2.0)),
        # Biased memories widen the age gap from 2 to 6 (GBV 1 → 3) and lower everyone by 4.
        c.CellKey(scope=biased, mode="off"): record(biased, "off", scores(6.0, -4.0)),
        # DMT halves the widening (gap 4: GBV 2).
        c.CellKey(scope=biased, mode="dmt"): record(biased, "dmt", scores(4.0, -4.0)),
        # Neutral memories lower everyone by 4 and leave the gap alone.
        c.CellKey(scope=neutral, mode="off"): record(neutral, "off", scores(2.0, -4.0)),
    }
    results = build_results(config, records)
    rows = results.readouts["expected"].rows
    off = find_row(rows, biased, "off")
    dmt = find_row(rows, biased, "dmt")
    control = find_row(rows, neutral, "off")
    assert off is not None and dmt is not None and control is not None
    # GBV of two groups a gap g apart is g/2: ΔGBV_age = 3 − 1.
    assert off.diagonal is not None and off.diagonal.value == pytest.approx(2.0)
    # The jitter is shared, so every resample gives the same Δ: a CI of width 0.
    assert off.diagonal.ci.low == pytest.approx(2.0) and off.diagonal.ci.high == pytest.approx(2.0)
    assert off.off_diagonal is not None and off.off_diagonal.value == pytest.approx(0.0)
    assert off.agbv.value == pytest.approx(1.0)  # (2 + 0) / 2
    # Δs̄: the mean of the group means moves by −4 minus half the extra gap on age.
    assert off.diagonal_shift is not None and off.diagonal_shift.value == pytest.approx(-6.0)
    assert off.mean_shift.value == pytest.approx((-6.0 - 4.0) / 2)
    assert dmt.diagonal is not None and dmt.diagonal.value == pytest.approx(1.0)
    assert dmt.mp_diagonal is not None and dmt.mp_diagonal.value == pytest.approx(-50.0)
    assert dmt.mp_agbv is not None and dmt.mp_agbv.value == pytest.approx(-50.0)
    assert off.mp_diagonal is None
    assert off.content is not None and off.content.value == pytest.approx(2.0)
    assert control.diagonal is None and control.agbv.value == pytest.approx(0.0)
    # The written integers give the same picture here (integer scores).
    written = find_row(results.readouts["written"].rows, biased, "off")
    assert written is not None and written.diagonal is not None
    assert written.diagonal.value == pytest.approx(2.0)
    assert results.cells_done == 5 and results.cells_planned == 2 + 2 + 1
    # The jackknife-t estimates (dose-results-v2): exact here too, with zero width.
    assert off.diagonal_jk is not None and off.diagonal_jk.value == pytest.approx(2.0)
    assert off.content_jk is not None and off.content_jk.value == pytest.approx(2.0)
    assert dmt.vs_off_jk is not None and dmt.vs_off_jk.value == pytest.approx(-1.0)
    assert dmt.mp_defined is True and off.mp_defined is None
    text = report.render_text(results)
    assert "content age k=3" in text and "MP ≤ −40%" in text


def test_paired_permutation_by_hand() -> None:
    base = {f"c{i}": {"A": 50.0, "B": 50.0} for i in range(6)}
    moved = {f"c{i}": {"A": 60.0, "B": 40.0} for i in range(6)}
    perm = paired_permutation(moved, base, n_permutations=500, seed=1)
    # Observed ΔGBV 10; a swap moves 10/6 per context, so |Δ| = 10 only with no swap or all.
    assert perm.p_value is not None and perm.p_value < 0.1
    # 2^6 = 64 swap patterns <= 500: all enumerated, p exact = 2 / 64 (none and all).
    assert perm.n == 64 and perm.p_value == pytest.approx(2 / 64)
    sampled = paired_permutation(moved, base, n_permutations=50, seed=1)
    assert sampled.n == 50 and sampled.p_value is not None and sampled.p_value < 0.2
    assert perm.abs_p95 is not None and perm.abs_p95 < 10.0
    same = paired_permutation(base, base, n_permutations=100)
    assert same.p_value == pytest.approx(1.0) and same.abs_p95 == pytest.approx(0.0)
    assert paired_permutation({"c0": {"A": 1.0}}, base).n == 0  # one shared context: none
    assert paired_permutation(moved, base, n_permutations=0).p_value is None


def test_missing_baseline_or_empty_results_report_without_crashing(tmp_path: Path) -> None:
    config = parse_dose_config({"sources": ["age"], "doses": [0, 1], "modes": ["off"],
                                "kinds": ["biased"], "dib": {"domains": ["age"]}})  # fmt: skip
    empty = build_results(config, {})
    assert empty.cells_done == 0 and empty.readouts["expected"].rows == []
    assert "nothing to report" in report.render_text(empty)
    report.write_report(empty, tmp_path)
    assert (tmp_path / "report.md").exists() and (tmp_path / "results.json").exists()
    scope = c.ScopeKey(source="age", kind="biased", k=1)
    only = {c.CellKey(scope=scope, mode="off"): record(scope, "off", scores(2.0))}
    assert build_results(config, only).readouts["expected"].rows == []  # no baseline yet


def test_estimate_counts_the_cells_and_writes_to_do() -> None:
    config = parse_dose_config({"sources": ["age"], "doses": [0, 1], "modes": ["off", "dmt"],
                                "kinds": ["biased"], "dib": {"domains": ["age"]}})  # fmt: skip
    est = estimate.build(config, None, {}, "assumed")
    n = est.decisions_per_cell
    assert est.cells_todo == est.cells_total == 3 and n == 4 * 3
    assert est.seed_writes == est.audited_writes == 1
    # The empty scope's decisions are priced apart (memory-less decisions are faster).
    dib = next(r for r in est.roles if r.role == "dib")
    empty = next(r for r in est.roles if r.role == "dib_empty")
    assert dib.calls == 2 * n and empty.calls == n and dib.latency_source == "assumed"
    assert dib.seconds == pytest.approx(2 * n * estimate.ASSUMED_S["dib"] / 2)
    assert "about" in estimate.render(est)
    assert est.total_hours == pytest.approx(sum(r.seconds for r in est.roles) / 3600, abs=0.005)


# ------------------------------------------------------------------ CLI and resume


def test_dry_run_prints_the_estimate_and_runs_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["dose", "--sources", "age,race,ses", "--doses", "0,10", "--no-probe",
                 "--dry-run", "--out", str(tmp_path / "never")])  # fmt: skip
    assert code == 0
    text = capsys.readouterr().out
    assert "cost estimate" in text and "cells to ask" in text and "assumed" in text
    assert not (tmp_path / "never").exists()


def test_a_run_asks_the_baseline_then_the_largest_dose_of_every_source_first() -> None:
    order = [(a.scope.name, a.audit) for a in c.audits(DoseConfig())]
    assert order[:2] == [("empty", "plain"), ("empty", "ssp")]
    assert [name for name, _ in order[2:17:5]] == ["age-biased-k10", "race-biased-k10",
                                                   "ses-biased-k10"]  # fmt: skip
    assert order[17] == ("any-neutral-k10", "off")
    assert order[-1] == ("any-neutral-k1", "off")


def test_the_dose_proxy_shows_every_memory_to_every_decision() -> None:
    """The k newest memories (k = the largest dose), not the k most relevant."""
    config = parse_dose_config({"version": 1, "name": "t", "doses": [0, 3, 10]})
    memory = dose_policy(config)["memory"]
    assert memory["top_k"] == 10 and memory["retrieval"] == "recent"
    assert "options" not in memory
    chosen = parse_dose_config({"version": 1, "name": "t", "backend_options": {"infer": False}})
    assert dose_policy(chosen)["memory"]["options"] == {"infer": False}
