"""Asking, scoring, running and reporting, against the shipped FakeDecisionUpstream.

The fake (``dmt_bench.testing.dib``) is a scripted OpenAI-compatible endpoint,
not a model: it stands in for the error paths and wire shapes (no logprobs,
rejected grammar, refusals, 500s) that the real local model cannot be made to
produce on demand. The real model is exercised in tests/e2e/test_dib_e2e.py.
"""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest

from dmt_bench.dib.answers import GRAMMAR_0_100
from dmt_bench.dib.generator import generate
from dmt_bench.dib.report import build_report, render_table
from dmt_bench.dib.runner import run_decisions
from dmt_bench.dib.schema import Sample
from dmt_bench.dib.scorer import Method, Outcome, ScoringConfig, ScoringMode, ask
from dmt_bench.endpoint import Endpoint
from dmt_bench.testing.dib import FakeDecisionUpstream, ScriptedSteps, prompt_of

ENDPOINT = Endpoint(base_url="http://fake.invalid/v1", model="fake-model", concurrency=3)


@pytest.fixture(scope="module")
def race() -> list[Sample]:
    return generate(0, ["race"])[:8]  # two counterfactual sets


async def test_expected_mode_sends_grammar_and_logprobs_and_reads_them(
    race: list[Sample],
) -> None:
    fake = FakeDecisionUpstream(
        ScriptedSteps((("7", {"7": 0.6, "8": 0.3, "6": 0.1}), ("5", {"5": 0.5, "0": 0.5})))
    )
    result = await ask(race[0], ENDPOINT, client=fake.client(ENDPOINT))
    body = fake.requests[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    assert body["grammar"] == GRAMMAR_0_100 and body["temperature"] == 0.0
    assert body["messages"] == race[0].messages()
    assert result.outcome is Outcome.SCORED and result.method is Method.EXPECTED
    assert result.raw == pytest.approx(74.5) and result.greedy == 75
    assert result.score == result.raw


async def test_missing_logprobs_fall_back_to_parsing_the_same_reply(race: list[Sample]) -> None:
    fake = FakeDecisionUpstream("62", logprobs=False)
    result = await ask(race[0], ENDPOINT, client=fake.client(ENDPOINT))
    assert len(fake.requests) == 1
    assert result.method is Method.PARSED and result.raw == 62.0


async def test_risk_is_inverted_into_favourability() -> None:
    risk = generate(0, ["disability"])[0]
    fake = FakeDecisionUpstream("30")
    result = await ask(risk, ENDPOINT, client=fake.client(ENDPOINT))
    assert result.raw == 30.0 and result.score == 70.0


async def test_generate_mode_counts_refusals_and_unparseable(race: list[Sample]) -> None:
    config = ScoringConfig(mode=ScoringMode.GENERATE)
    replies = iter(["I'm sorry, I can't score people by race.", "maybe 70 or 80", "70"])
    fake = FakeDecisionUpstream(lambda body: next(replies))
    client = fake.client(ENDPOINT)
    outcomes = [(await ask(s, ENDPOINT, config, client=client)) for s in race[:3]]
    assert [r.outcome for r in outcomes] == [Outcome.REFUSED, Outcome.UNPARSEABLE, Outcome.SCORED]
    assert outcomes[0].score is None and outcomes[1].score is None
    assert "grammar" not in fake.requests[0] and "logprobs" not in fake.requests[0]


async def test_server_errors_are_results_not_exceptions(race: list[Sample]) -> None:
    fake = FakeDecisionUpstream(fail_with=500)
    result = await ask(race[0], ENDPOINT, client=fake.client(ENDPOINT))
    assert result.outcome is Outcome.ERROR and "InternalServerError" in result.reason


async def test_runner_drops_a_rejected_grammar_and_keeps_order(race: list[Sample]) -> None:
    fake = FakeDecisionUpstream("55", reject_grammar=True)
    out = await run_decisions(race, ENDPOINT, client=fake.client(ENDPOINT), progress=None)
    assert out.config.grammar is False
    assert [r.sample_id for r in out.results] == [s.id for s in race]
    assert all(r.outcome is Outcome.SCORED and r.raw == 55.0 for r in out.results)


async def test_runner_respects_endpoint_concurrency_one_decision_per_context_at_a_time() -> None:
    six_contexts = generate(0, ["race"])[:24]
    context_of = {s.prompt: s.context_id for s in six_contexts}
    in_flight = peak = 0
    busy: list[str] = []
    fake = FakeDecisionUpstream("50")

    async def slow(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        context = context_of[prompt_of(json.loads(request.content))]
        # Decisions of one context go one after another, so one server slot's prefix
        # cache serves them all; different contexts run side by side.
        assert context not in busy, "two decisions of one context were in flight together"
        busy.append(context)
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        busy.remove(context)
        return fake.handle(request)

    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        base_url=ENDPOINT.base_url,
        api_key="x",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(slow)),
    )
    out = await run_decisions(six_contexts, ENDPOINT, client=client, progress=None)
    assert [r.sample_id for r in out.results] == [s.id for s in six_contexts]
    assert peak == ENDPOINT.concurrency


def _biased(body: dict[str, Any]) -> str:
    prompt = prompt_of(body)
    if "Black or African American" in prompt:
        return "40"
    if "Hispanic or Latino" in prompt:
        return "I can't answer that."
    return "60"


async def test_report_counts_refusals_per_group_and_gets_the_gbv(race: list[Sample]) -> None:
    fake = FakeDecisionUpstream(_biased)
    out = await run_decisions(
        race,
        ENDPOINT,
        ScoringConfig(mode=ScoringMode.GENERATE),
        client=fake.client(ENDPOINT),
        progress=None,
    )
    report = build_report(
        race,
        out.results,
        model="fake",
        base_url=ENDPOINT.base_url,
        scoring=out.config,
        seed=0,
        sample=None,
        elapsed_s=1.0,
        n_bootstrap=100,
        n_permutations=100,
    )
    (d,) = report.domains
    groups = {g.group: g for g in d.groups}
    assert groups["Hispanic"].refused == 2 and groups["Hispanic"].mean is None
    assert groups["Black"].mean == 40.0 and groups["White"].mean == 60.0
    assert d.refusal_rate == pytest.approx(0.25)
    # K = 3 scored groups (60, 40, 60): mean 53.33 -> sqrt((44.4 + 177.8 + 44.4) / 3)
    assert d.gbv == pytest.approx(math.sqrt(((20 / 3) ** 2 * 2 + (40 / 3) ** 2) / 3))
    assert report.agbv == d.gbv
    pair = next(p for p in d.pairs if (p.a, p.b) == ("White", "Black"))
    assert pair.mean == 20.0 and pair.n_contexts == 2
    table = render_table(report)
    assert "race" in table and "25.0%" in table and "Hispanic n/a" in table
    data = json.loads(report.model_dump_json())
    assert data["report_version"] == "dib-report-v3" and data["dib_version"] == "dib-v1"


def test_fair_fake_gives_zero_gbv_in_the_report(race: list[Sample]) -> None:
    fake = FakeDecisionUpstream("70")
    out = asyncio.run(run_decisions(race, ENDPOINT, client=fake.client(ENDPOINT), progress=None))
    report = build_report(
        race,
        out.results,
        model="fake",
        base_url="x",
        scoring=out.config,
        seed=0,
        sample=8,
        elapsed_s=2.0,
        n_bootstrap=50,
        n_permutations=50,
    )
    assert report.domains[0].gbv == 0.0 and report.decisions_per_s == 4.0
