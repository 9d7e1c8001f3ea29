"""Seed sets in the dose config, contrasts with jackknife-t intervals, the pre-registration.

The whole pipeline (seeding the sets, the positive control, the report and its
pre-registration check) runs through ``FakeProxy`` in
``tests/integration/test_dose_confirmatory_runs.py``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from dmt_bench.dose import cells as c
from dmt_bench.dose import estimate
from dmt_bench.dose import preregistration as p
from dmt_bench.dose.config import load_dose_config, parse_dose_config
from dmt_bench.dose.contrasts import contexts_of, contrast, mean_terms
from dmt_bench.dose.runner import dose_samples, scope_samples
from dmt_bench.dose.seed_sets import shipped_library
from dmt_bench.stats import t_quantile
from dmt_proxy.errors import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"
SETS: dict[str, Any] = {"set": "dose_seeds_v1"}


def sets_config(**extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "sources": ["age"], "doses": [0, 10], "kinds": ["biased", "neutral", "directive"],
        "modes": ["off", "dmt"], "neutral_modes": ["off", "dmt"], "seeds": dict(SETS),
        "dib": {"domains": ["age"], "contexts_per_domain": 2},
    }  # fmt: skip
    raw.update(extra)
    return raw


# ----------------------------------------------------------------- config


def test_seed_sets_make_one_scope_per_set_and_dose() -> None:
    config = parse_dose_config(sets_config(doses=[0, 3, 10]))
    names = [s.name for s in c.scopes(config)]
    # Every stereotyped and directive set of age and every neutral set, at k = 3 and 10.
    assert names[:3] == ["empty", "age-1-k3", "age-1-k10"]
    assert "age-directive-1-k10" in names and "neutral-3-k3" in names
    assert len(names) == 1 + (3 + 1 + 3) * 2
    neutral = next(s for s in c.scopes(config) if s.kind == "neutral")
    assert neutral.source is None and neutral.set == "neutral-1"
    # The positive control and the neutral sets are read in every mode.
    assert {cell.mode for cell in c.cells(config) if cell.scope.kind == "directive"} == {
        "off",
        "dmt",
    }
    seeds = shipped_library().seeds("directive", "age-directive-1", 3)
    assert [s.id for s in seeds] == ["age-directive-1-01", "age-directive-1-02",
                                     "age-directive-1-03"]  # fmt: skip
    assert seeds[0].label == "biased" and seeds[0].strategy == "directive"


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (sets_config(seeds={**SETS, "biased": {"age": ["race-1"]}}), "about race, not age"),
        (sets_config(seeds={**SETS, "biased": {"age": ["age-9"]}}), "no stereotyped seed set"),
        (sets_config(seeds={**SETS, "neutral_sets": ["age-1"]}), "no neutral seed set"),
        (sets_config(seeds={**SETS, "directive": {"race": ["race-directive-1"]}}),
         "not sources: race"),
        (sets_config(seeds={**SETS, "biased": {"age": ["age-1", "age-1"]}}), "named twice"),
        (sets_config(doses=[0, 11]), "hold 10 memories"),
        (sets_config(seeds={"set": "auditor_eval_v1"}), "needs seeds.set: dose_seeds_v1"),
        (sets_config(seeds={"set": "auditor_eval_v1", "biased": {"age": ["age-1"]}}),
         "set seeds.set: dose_seeds_v1"),
        (sets_config(seeds={**SETS, "neutral": "hard_negative"}), "names neutral_sets"),
        (sets_config(dib={"domains": ["age"], "contexts_per_domain": 4,
                          "exclude_contexts": ["age-070", "age-001"]}), "excluded context"),
        (sets_config(seeds={"set": "v9"}), "seeds.set"),
    ],
)  # fmt: skip
def test_seed_set_config_errors_name_the_problem(raw: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigError, match=problem):
        parse_dose_config(raw)


def test_committed_dose_configs_keep_loading() -> None:
    old = load_dose_config(CONFIGS / "dose_local.yaml")
    assert old.seeds.set == "auditor_eval_v1" and not old.seeds.uses_sets()
    assert [s.name for s in c.scopes(old)][:2] == ["empty", "age-biased-k3"]


def test_the_confirmatory_config_is_the_registered_design() -> None:
    config = load_dose_config(CONFIGS / "dose_confirmatory_v1.yaml")
    assert config.models.agent.model == "local/qwen2.5-1.5b"
    assert config.sources == ["age", "race"] and config.doses == [0, 10]
    assert config.modes == config.neutral_modes == ["off", "ssp", "dmt", "dmt-tags",
                                                    "dmt-instruction"]  # fmt: skip
    assert config.seeds.biased is not None
    assert all(len(config.seeds.biased[s]) >= 3 for s in config.sources)
    audits = c.audits(config)
    assert len(audits) == 2 + 30 + 10 + 15
    # The primary endpoints' cells (every kind in off, then in dmt) are read first.
    assert [a.audit for a in audits[2:13]] == ["off"] * 11  # 6 stereotyped, 2 directive, 3 neutral
    assert {a.audit for a in audits[13:24]} == {"dmt"}
    samples = dose_samples(config)
    contexts = {s.context_id for s in samples}
    assert sum(1 for x in contexts if x.startswith("age")) == 24
    assert sum(1 for x in contexts if x.startswith("race")) == 24
    # None of the contexts the committed dose run asked.
    assert not contexts & {"age-070", "age-082", "age-097", "age-105", "race-037", "race-042",
                           "race-057", "race-069"}  # fmt: skip
    assert sum(len(scope_samples(config, a.scope, samples)) for a in audits) == 6216
    prereg = p.load_preregistration(CONFIGS.parent.parent / config.preregistration.path)  # type: ignore[union-attr]
    p.check_against_config(prereg, config)
    assert [e.id for e in prereg.primary] == ["content-age", "content-race", "dmt-reduction-age",
                                              "dmt-reduction-race"]  # fmt: skip
    assert prereg.analysis.multiplicity == "holm" and prereg.analysis.alpha == 0.05
    # Priced with the committed dose run's k = 3 cells (a block of that size): <= 5 h.
    rates = estimate.latencies_from_other_run(
        [CONFIGS.parent / "results" / "dose" / "dose_local"], k=3
    )
    assert estimate.build(config, None, rates, "dose_local").total_hours <= 5.0


def test_the_nine_source_config_prices_under_three_hours() -> None:
    config = load_dose_config(CONFIGS / "dose_nine_sources_v1.yaml")
    assert len(config.sources) == 9 and config.doses == [0, 10] and config.modes == ["off"]
    assert config.dib.contexts_per_domain >= 8 and "neutral" in config.kinds
    rates = estimate.latencies_from_other_run(
        [CONFIGS.parent / "results" / "dose" / "dose_local"], k=3
    )
    assert estimate.build(config, None, rates, "dose_local").total_hours <= 3.0


# ----------------------------------------------------------------- contrasts


def test_contrast_jackknife_by_hand() -> None:
    # Two groups per context; the "plus" cell widens the gap by 2, 4 and 6 in contexts 1-3,
    # so GBV(plus) − GBV(minus) over a set of contexts is half the mean extra gap.
    minus = {f"c{i}": {"a": 50.0, "b": 50.0} for i in (1, 2, 3)}
    plus = {f"c{i}": {"a": 50.0 + 2 * i, "b": 50.0} for i in (1, 2, 3)}
    scored = {"p": {"age": plus}, "m": {"age": minus}}
    est = contrast(scored, mean_terms(["p"], ["m"]), "age")
    assert est.value == pytest.approx(2.0) and contexts_of(est) == 3 and est.df == 2
    # The statistic is the mean of per-context values 1, 2, 3 (GBV of two groups = |gap|/2
    # of pooled means): the jackknife is the one-sample t interval, SE = 1/sqrt(3).
    half = t_quantile(0.975, 2) / math.sqrt(3)
    assert est.low == pytest.approx(2.0 - half) and est.high == pytest.approx(2.0 + half)
    assert 0 < est.p_value < 0.1
    se = 1 / math.sqrt(3)
    assert est.mde == pytest.approx((t_quantile(0.975, 2) + t_quantile(0.8, 2)) * se)
    assert math.isnan(contrast(scored, mean_terms(["p"], []), "age").value)
    assert math.isnan(contrast(scored, mean_terms(["p"], ["m"]), "race").value)


# ----------------------------------------------------------------- pre-registration


def test_preregistration_parsing_and_its_definitions_digest() -> None:
    text = (CONFIGS / "dose_confirmatory_v1.prereg.yaml").read_text()
    prereg = p.parse_preregistration(text, "x")
    noted = p.parse_preregistration(text.replace("notes: >-", "notes: >-\n  Another note."), "x")
    assert noted.definitions_digest() == prereg.definitions_digest()
    moved = p.parse_preregistration(text.replace("min_gap: 2.0", "min_gap: 1.0"), "x")
    assert moved.definitions_digest() != prereg.definitions_digest()
    with pytest.raises(ConfigError, match="a reduction compares a mode with off"):
        p.parse_preregistration(text.replace("mode: dmt", "mode: off"), "x")
    with pytest.raises(ConfigError, match="unique"):
        p.parse_preregistration(text.replace("id: content-race", "id: content-age"), "x")
