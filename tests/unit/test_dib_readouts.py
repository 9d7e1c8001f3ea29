"""Both DIB readouts (expected value, written integer), the mean of the groups and the MDE.

Hand-computed cases on DecisionResults, and one run against the shipped
FakeDecisionUpstream (a scripted endpoint, not a model) whose log-probabilities
make the expected value differ by group while the written integer never does.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from dmt_bench.dib.generator import SAMPLING_V1, generate
from dmt_bench.dib.readouts import (
    HEADLINE_WHY,
    Readout,
    domain_directions,
    readout_score,
)
from dmt_bench.dib.report import (
    DibReport,
    build_report,
    context_scores,
    mde_between_runs,
    render_table,
)
from dmt_bench.dib.runner import run_decisions
from dmt_bench.dib.schema import Direction
from dmt_bench.dib.scorer import DecisionResult, Method, Outcome, ScoringConfig
from dmt_bench.endpoint import Endpoint
from dmt_bench.testing.dib import FakeDecisionUpstream, ScriptedSteps, prompt_of

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "dib"


def result(domain: str, ctx: str, group: str, raw: float, greedy: int | None) -> DecisionResult:
    inverted = domain == "disability"
    return DecisionResult(sample_id=f"{ctx}/{group}", domain=domain, group=group, context_id=ctx,
                          outcome=Outcome.SCORED, method=Method.EXPECTED, raw=raw,
                          score=100 - raw if inverted else raw, greedy=greedy)  # fmt: skip


def test_written_readout_is_the_integer_as_favourability() -> None:
    r = result("race", "race-000", "White", 81.4, 85)
    assert readout_score(r, Readout.EXPECTED, Direction.HIGHER_IS_FAVOURABLE) == 81.4
    assert readout_score(r, Readout.WRITTEN, Direction.HIGHER_IS_FAVOURABLE) == 85.0
    risk = result("disability", "disability-000", "None", 31.2, 30)  # risk 30 -> 70
    assert readout_score(risk, Readout.EXPECTED, Direction.LOWER_IS_FAVOURABLE) == 68.8
    assert readout_score(risk, Readout.WRITTEN, Direction.LOWER_IS_FAVOURABLE) == 70.0
    old = r.model_copy(update={"greedy": None})  # written before the integer was kept
    assert readout_score(old, Readout.WRITTEN, Direction.HIGHER_IS_FAVOURABLE) is None
    refused = DecisionResult(sample_id="x", domain="race", group="Black", context_id="c",
                             outcome=Outcome.REFUSED, method=Method.NONE)  # fmt: skip
    assert readout_score(refused, Readout.EXPECTED, Direction.HIGHER_IS_FAVOURABLE) is None


def test_directions_come_from_the_registry_or_from_the_scores() -> None:
    unknown_inverted = result("plugin-risk", "p-0", "a", 30.0, 30).model_copy(
        update={"score": 70.0}
    )
    unknown_plain = result("plugin-plain", "q-0", "a", 50.0, 50)
    got = domain_directions([result("disability", "d", "None", 50.0, 50), unknown_inverted,
                             unknown_plain])  # fmt: skip
    assert got == {
        "disability": Direction.LOWER_IS_FAVOURABLE,
        "plugin-risk": Direction.LOWER_IS_FAVOURABLE,
        "plugin-plain": Direction.HIGHER_IS_FAVOURABLE,
    }


def two_readouts() -> list[DecisionResult]:
    """Race, two contexts: expected 84 / 81 / 84 / 84, every decision written as 85."""
    return [
        result("race", ctx, g, 81.0 if g == "Black" else 84.0, 85)
        for ctx in ("race-000", "race-001")
        for g in ("White", "Black", "Asian", "Hispanic")
    ]


def test_report_gives_both_readouts_hand_computed() -> None:
    report = build_report([], two_readouts(), model="m", base_url="", scoring=ScoringConfig(),
                          seed=0, sample=None, elapsed_s=1.0, n_bootstrap=50,
                          n_permutations=20)  # fmt: skip
    (d,) = report.domains
    expected, written = d.readouts["expected"], d.readouts["written"]
    # group means 84, 81, 84, 84: centre 83.25, deviations .75, −2.25, .75, .75
    gbv = math.sqrt((3 * 0.75**2 + 2.25**2) / 4)
    assert expected.gbv == pytest.approx(gbv) and d.gbv == expected.gbv
    assert expected.mean == pytest.approx(83.25)
    assert expected.group_means == {"White": 84.0, "Black": 81.0, "Asian": 84.0, "Hispanic": 84.0}
    assert written.gbv == 0.0 and written.mean == 85.0
    # the two contexts are identical: every resample gives the same GBV, so no spread and
    # no MDE (a zero SE measures nothing), never an MDE of 0
    assert (expected.ci_low, expected.ci_high) == pytest.approx((gbv, gbv))
    assert expected.mde is None and written.mde is None
    assert report.headline == "expected" and report.readouts["written"].agbv == 0.0
    table = render_table(report)
    assert HEADLINE_WHY in table and "written integer" in table


def test_mde_is_2_8_bootstrap_se_times_root_2() -> None:
    reps = [1.0, 2.0, 3.0, 4.0]  # sd = sqrt(5/3)
    se = math.sqrt(5 / 3)
    assert mde_between_runs(reps) == pytest.approx(2.8015852 * math.sqrt(2) * se, abs=1e-6)
    assert math.isnan(mde_between_runs([]))


def test_a_thin_domain_loses_only_its_own_ci() -> None:
    rows = [
        result("age", f"age-00{i}", g, 70.0 + (2.0 * i if g == "Gen Z" else 0.0), 70)
        for i in range(4)
        for g in ("Gen Z", "Millennial", "Boomer")
    ]
    rows += [result("race", "race-000", g, 60.0 + k, 60) for k, g in enumerate(("White", "Black"))]
    report = build_report([], rows, model="m", base_url="", scoring=ScoringConfig(), seed=0,
                          sample=None, elapsed_s=1.0, n_bootstrap=200,
                          n_permutations=20)  # fmt: skip
    age, race = report.domains
    assert age.ci_low is not None and age.ci_high is not None  # four contexts: its own CI
    assert age.readouts["expected"].mde is not None
    assert race.ci_low is None and race.gbv == pytest.approx(0.5)  # one context: none
    assert report.agbv_ci_low is None  # AGBV averages every domain
    assert "No CI for race" in render_table(report)


def test_committed_v1_reports_still_load() -> None:
    # the 1.5B baseline as its run wrote it (dib-report-v1), before `dib report` rebuilt it
    golden = Path(__file__).parent / "golden" / "dib_baseline_qwen2.5-1.5b_n150.dib-report-v1.json"
    report = DibReport.model_validate(json.loads(golden.read_text(encoding="utf-8")))
    assert report.report_version == "dib-report-v1" and report.sampling == SAMPLING_V1
    assert report.readouts == {} and report.headline == "expected"
    assert "AGBV" in render_table(report)
    for path in sorted(RESULTS.glob("*/report.json")):  # rebuilt with `dmt-bench dib report`
        rebuilt = DibReport.model_validate(json.loads(path.read_text(encoding="utf-8")))
        assert rebuilt.report_version == "dib-report-v3" and rebuilt.sampling == SAMPLING_V1
        assert "AGBV" in render_table(rebuilt)


def test_committed_decisions_give_written_gbv_zero_in_7_of_9_domains() -> None:
    # The 1.5B baseline wrote 85 in 139 of 153 decisions (issue 18).
    path = RESULTS / "baseline_qwen2.5-1.5b_n150" / "decisions.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    results = [DecisionResult.model_validate_json(line) for line in lines if line.strip()]
    assert sum(r.greedy == 85 for r in results) == 139
    written = context_scores(results, Readout.WRITTEN)
    from dmt_bench.gbv import gbv_of_contexts

    zero = [d for d, ctx in written.items() if gbv_of_contexts(ctx) == 0.0]
    assert len(zero) == 7 and set(written) - set(zero) == {"ses", "appearance"}


def _same_integer_different_confidence(body: dict[str, Any]) -> ScriptedSteps:
    # "85" written every time; the first digit's alternative is "7" (-> 75 off path), so the
    # expected value is 75 + 10·p(8): 84 for most groups, 81 for one.
    p = 0.6 if "Black or African American" in prompt_of(body) else 0.9
    return ScriptedSteps((("8", {"8": p, "7": 1 - p}), ("5", {"5": 1.0})))


async def test_fake_endpoint_run_shows_what_the_written_integer_hides() -> None:
    samples = generate(0, ["race"])[:8]  # two counterfactual sets
    endpoint = Endpoint(base_url="http://fake.invalid/v1", model="fake", concurrency=2)
    fake = FakeDecisionUpstream(_same_integer_different_confidence)
    out = await run_decisions(samples, endpoint, client=fake.client(endpoint), progress=None)
    assert {r.greedy for r in out.results} == {85}
    report = build_report(samples, out.results, model="fake", base_url="", scoring=out.config,
                          seed=0, sample=None, elapsed_s=1.0, n_bootstrap=50,
                          n_permutations=20)  # fmt: skip
    (d,) = report.domains
    assert d.readouts["expected"].group_means["Black"] == pytest.approx(81.0)
    assert d.readouts["expected"].gbv == pytest.approx(math.sqrt((3 * 0.75**2 + 2.25**2) / 4))
    assert d.readouts["written"].gbv == 0.0
