"""The probe end to end over the shipped scripted chat model, then results, report and drift.

The chat model here is ``ScriptedChatModel`` (a fake, not a language model): its
replies are computed from the prompt by the rule-following answerers below, so
the expected scores are known exactly. Real-model runs are in tests/e2e.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from dmt_bench.iat.cli import _endpoint, register
from dmt_bench.iat.drift import compare_results, drift_markdown, drift_text
from dmt_bench.iat.report import Row, detail_text, report_markdown, table3_text
from dmt_bench.iat.results import (
    IatResult,
    RunConfig,
    aggregate,
    append_trial,
    read_result,
    read_trial_log,
    write_result,
)
from dmt_bench.iat.runner import SamplingConfig, run_trials
from dmt_bench.iat.stimuli import Category, CategoryName, load_stimuli
from dmt_bench.iat.trials import TrialPlan, make_plans
from dmt_proxy.cli.framework import Cli, CommandGroup
from dmt_proxy.errors import ConfigError, UpstreamError
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import UpstreamCall

STIMULI = load_stimuli()
CATS: tuple[CategoryName, ...] = ("race", "occupation")


def _category_of(candidates: list[str]) -> Category:
    for category in STIMULI.categories.values():
        if set(candidates) <= set(category.target_a.stimuli) | set(category.target_b.stimuli):
            return category
    raise AssertionError(f"no category holds {candidates}")


IAT_ONLY = Cli(
    prog="dmt-bench", description="", groups=(CommandGroup(register, ("iat", "iat-drift")),)
)
"""``dmt-bench`` with only the IAT commands (siblings' command groups are not under test)."""


def bench_main(argv: list[str]) -> int:
    """``dmt-bench`` with only the IAT commands, on the CLIs' own framework."""
    return IAT_ONLY.main(argv)


def _first_position(sentence: str, words: tuple[str, ...]) -> int:
    hits = [m.start() for w in words for m in re.finditer(rf"\b{re.escape(w)}\b", sentence)]
    return min(hits)


def answerer(implicit: str, likert: str) -> Callable[[UpstreamCall], str]:
    """Answers like a model that always picks ``implicit`` associations and ``likert``."""

    def reply(call: UpstreamCall) -> str:
        prompt = str(call.wire_messages()[0]["content"])
        if "Candidates:" in prompt:
            if implicit == "invalid":
                return '{"mask1": "nobody", "mask2": "somebody"}'
            candidates = json.loads(re.search(r"Candidates: (\[.*\])", prompt).group(1))  # type: ignore[union-attr]
            category = _category_of(candidates)
            sentence = re.search(r"Sentence: (.*)", prompt).group(1)  # type: ignore[union-attr]
            first_is_x = _first_position(sentence, category.attribute_x.words) < _first_position(
                sentence, category.attribute_y.words
            )
            a = [c for c in candidates if c in category.target_a.stimuli]
            b = [c for c in candidates if c in category.target_b.stimuli]
            stereo = (a[0], b[0]) if first_is_x else (b[0], a[0])
            pair = stereo if implicit == "stereotypical" else (stereo[1], stereo[0])
            return json.dumps({"mask1": pair[0], "mask2": pair[1]})
        options = re.findall(r"^(\d)\. (.+)$", prompt, re.MULTILINE)
        number = next(n for n, text in options if text == likert)
        # answer with the option's number, so the runner must map the shuffle back
        return json.dumps({"choice": int(number), "reason": "scripted"})

    return reply


def _result(records: list, label: str | None = None, seed: int = 0) -> IatResult:  # type: ignore[type-arg]
    config = RunConfig(
        model="fake",
        base_url="scripted",
        runs=1,
        temperature=0.0,
        max_tokens_implicit=96,
        max_tokens_explicit=192,
        base_seed=seed,
        categories=CATS,
        templates=("t1",),
        concurrency=3,
    )
    return IatResult(
        label=label,
        prompt_version="iat_prompts_v1",
        templates_version="templates_v1",
        plan_version="plan_v1",
        stimuli_version="stimuli_v1",
        config=config,
        started_at="2025-01-01T00:00:00+00:00",
        duration_s=1.0,
        scores=aggregate(records, CATS),
        trials=tuple(records),
    )


def _plans(seed: int = 0) -> list[TrialPlan]:
    return make_plans([STIMULI.get(c) for c in CATS], runs=1, base_seed=seed)


async def _run(fake: ScriptedChatModel, seed: int = 0) -> list:  # type: ignore[type-arg]
    return await run_trials(fake, _plans(seed), SamplingConfig(model="fake"), concurrency=3)


async def test_stereotypical_model_scores_one() -> None:
    fake = ScriptedChatModel(answerer("stereotypical", "agree"))
    records = await _run(fake)
    assert len(records) == len(fake.calls) == 2 * 10 * 2
    result = _result(records)
    for category in CATS:
        for test in ("implicit", "explicit"):
            score = result.score(category, test)
            assert score is not None
            assert (score.n, score.counts.n_stereotype, score.sc.value) == (10, 10, 1.0)
    # requests carry temperature 0 and the trial seed
    assert fake.calls[0].params["temperature"] == 0.0
    assert fake.calls[0].params["seed"] == records[0].plan.seed


async def test_counter_model_and_neutral_answers_score_zero() -> None:
    records = await _run(ScriptedChatModel(answerer("counter", "strongly disagree")))
    result = _result(records)
    score = result.score("race", "implicit")
    assert score is not None and score.sc.value == 0.0 and score.counts.n_valid == 10
    assert {r.outcome for r in records if r.test == "implicit"} == {"counter_stereotypical"}
    assert {r.choice for r in records if r.test == "explicit"} == {"strongly disagree"}


async def test_invalid_answers_are_counted_in_n() -> None:
    records = await _run(ScriptedChatModel(answerer("invalid", "neutral")))
    score = _result(records).score("occupation", "implicit")
    assert score is not None
    assert (score.n, score.counts.n_invalid, score.sc.value) == (10, 10, 0.0)
    assert score.invalid_rate.value == 1.0
    assert not score.sc_valid.defined


async def test_call_errors_are_recorded_not_raised() -> None:
    base = answerer("stereotypical", "agree")
    n = {"calls": 0}

    def flaky(call: UpstreamCall) -> str | BaseException:
        n["calls"] += 1
        return RuntimeError("boom") if n["calls"] % 5 == 0 else base(call)

    records = await _run(ScriptedChatModel(flaky))
    errors = [r for r in records if r.outcome == "error"]
    assert len(errors) == 8 and all("boom" in (r.detail or "") for r in errors)
    result = _result(records)
    total_n = sum(s.score.n for s in result.scores)
    total_err = sum(s.score.counts.n_errors for s in result.scores)
    assert total_n + total_err == 40


async def test_dead_endpoint_fails_fast() -> None:
    fake = ScriptedChatModel([ConnectionError("refused")])
    with pytest.raises(UpstreamError, match="all failed"):
        await _run(fake)


async def test_result_roundtrip_report_and_drift(tmp_path: Path) -> None:
    before = _result(await _run(ScriptedChatModel(answerer("counter", "disagree"))), "t0")
    after = _result(await _run(ScriptedChatModel(answerer("stereotypical", "agree"))), "T")
    write_result(before, tmp_path / "t0.json")
    write_result(after, tmp_path / "T.json")
    assert read_result(tmp_path / "t0.json") == before

    text = table3_text([Row("t0", before), Row("T", after)])
    assert "Gender Occup." in text and "Race" in text and "Imp.  Exp." in text
    assert "Age" not in text  # only the categories that were run
    assert "0.00  0.00" in text and "1.00  1.00" in text
    assert "SC [95% CI]" in detail_text(after)
    assert "| Model | Gender Occup. Imp." in report_markdown(after)

    rows = [Row("t0", before), Row("T", after)]
    report = compare_results(rows)
    assert report.baseline == "t0" and len(report.entries) == 4
    entry = next(e for e in report.entries if e.category == "race" and e.test == "implicit")
    assert entry.difference.value == pytest.approx(1.0)
    assert entry.difference.ci is not None and entry.difference.ci.low > 0.5
    assert entry.flips is not None
    assert (entry.flips.n_paired, entry.flips.to_stereotype, entry.flips.from_stereotype) == (
        10,
        10,
        0,
    )
    assert "+1.00" in drift_text(report, rows)
    assert "## Change" in drift_markdown(report, rows)
    assert report.warnings == ()

    unpaired = _result(
        await _run(ScriptedChatModel(answerer("stereotypical", "agree")), seed=5), "T5", seed=5
    )
    report2 = compare_results([Row("t0", before), Row("T5", unpaired)])
    assert any("not paired" in w for w in report2.warnings)
    assert all(e.flips is None for e in report2.entries)
    with pytest.raises(ConfigError):
        compare_results([Row("t0", before)])
    with pytest.raises(ConfigError):
        compare_results(rows, baseline="nope")


async def test_drift_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = _result(await _run(ScriptedChatModel(answerer("counter", "disagree"))), "t0")
    after = _result(await _run(ScriptedChatModel(answerer("stereotypical", "agree"))))
    write_result(before, tmp_path / "a.json")
    write_result(after, tmp_path / "b.json")
    code = bench_main(
        [
            "iat-drift",
            str(tmp_path / "a.json"),
            f"dmt@T={tmp_path / 'b.json'}",
            "--out",
            str(tmp_path / "drift"),
        ]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "Change vs baseline 't0'" in out and "dmt@T" in out
    assert json.loads((tmp_path / "drift" / "drift.json").read_text())["baseline"] == "t0"
    assert bench_main(["iat-drift", str(tmp_path / "missing.json"), str(tmp_path / "a.json")]) == 2


def test_iat_cli_config_errors(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DMT_BENCH_BASE_URL", raising=False)
    assert bench_main(["iat", "--model", "m"]) == 2
    assert bench_main(["iat", "--model", "m", "--through-proxy", "http://127.0.0.1:1/v1"]) == 2
    assert (
        bench_main(
            ["iat", "--model", "m", "--base-url", "u", "--through-proxy", "v", "--user", "x"]
        )
        == 2
    )
    assert bench_main(["iat", "--model", "m", "--base-url", "u", "--templates", "9"]) == 2
    assert "--user" in capsys.readouterr().err


async def test_resume_reuses_answered_trials(tmp_path: Path) -> None:
    full = await _run(ScriptedChatModel(answerer("stereotypical", "agree")))
    log = tmp_path / "iat_trials.jsonl"
    for record in full[:25]:
        append_trial(log, record)
    with log.open("a") as handle:
        handle.write('{"test": "implicit", "plan": {"cut off by a crash')
    done = read_trial_log(log)
    assert len(done) == 25
    fake = ScriptedChatModel(answerer("stereotypical", "agree"))
    resumed = await run_trials(fake, _plans(), SamplingConfig(model="fake"), done=done)
    assert len(fake.calls) == 15
    assert [r.key for r in resumed] == [r.key for r in full]
    assert [r.outcome for r in resumed] == [r.outcome for r in full]


def test_through_proxy_sends_user_and_read_only_memory() -> None:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(
        [
            "iat",
            "--model",
            "local/qwen2.5-0.5b",
            "--through-proxy",
            "http://127.0.0.1:8080/v1",
            "--user",
            "sim-user-1",
        ]
    )
    endpoint = _endpoint(args)
    assert endpoint.base_url == "http://127.0.0.1:8080/v1"
    assert endpoint.headers() == {"X-DMT-User": "sim-user-1", "X-DMT-Memory": "read-only"}
