"""The labelled set, stratified subsets, the runner, reports and CLI model resolution.

The runner test uses the shipped ``ScriptedAuditor`` (a fake auditor, not a
model): it checks bookkeeping, not auditor quality.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

import pytest

from dmt_bench.auditor_eval.cli import auditor_options, register, resolve_endpoint
from dmt_bench.auditor_eval.dataset import STRATEGIES, EvalItem, load_items, select
from dmt_bench.auditor_eval.metrics import summarize
from dmt_bench.auditor_eval.report import RunInfo, to_markdown, write_reports
from dmt_bench.auditor_eval.runner import run_items
from dmt_proxy.audit.auditor_prompt import load_auditor_prompt
from dmt_proxy.audit.protocol import AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.upstream.models import NO_KEY

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""


@pytest.fixture(scope="module")
def items() -> list[EvalItem]:
    return load_items()


def test_every_domain_and_strategy_has_six_biased_items_and_hard_negatives(
    items: list[EvalItem],
) -> None:
    cells = Counter((i.domain, i.strategy) for i in items if i.biased)
    assert cells == {(d, s): 6 for d in DOMAINS for s in STRATEGIES}
    hard = Counter(i.domain for i in items if i.kind == "hard_negative")
    assert hard == {d: 6 for d in DOMAINS}
    assert sum(i.kind == "mmlu" for i in items) >= 60
    assert all(i.mmlu_question_id is not None for i in items)
    assert len({i.mmlu_question_id for i in items}) == len(items)  # no question reused
    test = [i for i in items if i.split == "test"]
    assert sum(i.biased for i in test) == 54


@pytest.mark.parametrize("version", ["auditor_v1", "auditor_v2"])
def test_few_shot_examples_are_not_in_the_evaluation_set(
    items: list[EvalItem], version: str
) -> None:
    prompt = load_auditor_prompt(version)
    for example in prompt.examples:
        opening = example.memory[:60]
        assert not any(opening in i.text for i in items)


def test_stratified_subset_is_balanced_deterministic_and_covers_domains(
    items: list[EvalItem],
) -> None:
    subset = select(items, limit=40)
    assert len(subset) == 40 and subset == select(items, limit=40)
    assert sum(i.biased for i in subset) == 20
    assert {i.domain for i in subset if i.biased} == set(DOMAINS)
    assert {i.kind for i in subset if not i.biased} == {"hard_negative", "mmlu"}
    assert all(i.split == "test" for i in select(items, split="test", limit=10))
    assert len(select(items, split="test")) == 102


def test_bad_dataset_file_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x"}\n')
    with pytest.raises(ConfigError, match=r"bad\.jsonl:1"):
        load_items(bad)
    with pytest.raises(ConfigError):
        load_items(tmp_path / "missing.jsonl")


async def test_runner_summary_and_reports(items: list[EvalItem], tmp_path: Path) -> None:
    subset = select(items, limit=12)
    by_text = {i.text: i for i in subset}

    def verdict(c: AuditCandidate) -> AuditVerdict | BaseException:
        item = by_text[c.text]
        if item.id == subset[0].id:
            return AuditorUnavailable("down", upstream="fake", retryable=True)
        if item.id == subset[1].id:
            return AuditVerdict.failed("invalid reply after one repair retry", attempts=2)
        if item.biased:
            return AuditVerdict.biased(item.domain or "other", score=0.8)  # type: ignore[arg-type]
        return AuditVerdict.clean()

    lines: list[str] = []
    results = await run_items(
        ScriptedAuditor(verdict), subset, concurrency=3, progress=lines.append
    )
    assert [r.item.id for r in results] == [i.id for i in subset]
    assert len(lines) == 12 and lines[-1].startswith("[12/12]")
    summary = summarize(
        [r.prediction() for r in results], 0.5, domains=DOMAINS, strategies=STRATEGIES
    )
    assert summary.error_rate.k == 1 and summary.failure_rate.k == 1
    assert summary.overall.counts.fp == 0 and summary.bias_type_accuracy.value == 1.0
    info = RunInfo(
        model="fake", litellm_model="fake", api_base=None, prompt_version="auditor_v1",
        dataset="auditor_eval_v1", split="all", limit=12, structured_output="json_schema",
        concurrency=3, started_at="2025-01-01T00:00:00Z", wall_s=1.0,
    )  # fmt: skip
    json_path, md_path = write_reports(tmp_path, "auditor_eval_fake", info, summary, results)
    doc = json.loads(json_path.read_text())
    assert doc["report_version"] == "auditor_eval_report_v2" and len(doc["items"]) == 12
    assert doc["items"][0]["error"].startswith("down")
    assert "| **overall** |" in md_path.read_text()
    empty = summarize([], 0.5, domains=DOMAINS, strategies=STRATEGIES)
    assert "n/a" in to_markdown(info, empty)


async def test_runner_aborts_when_the_auditor_is_unreachable(items: list[EvalItem]) -> None:
    down = ScriptedAuditor([AuditorUnavailable("connection refused", upstream="x", retryable=True)])
    with pytest.raises(ConfigError, match="unreachable"):
        await run_items(down, items[:10], concurrency=1, progress=lambda _l: None)


def _args(**kw: object) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    argv = ["auditor-eval"]
    for key, value in kw.items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return parser.parse_args(argv)


def test_cli_resolves_local_server_alias_hosted_and_rejects_bare_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = resolve_endpoint(
        _args(model="qwen2.5-1.5b", base_url="http://127.0.0.1:8092/v1"), SETTINGS
    )
    assert (server.model, server.api_base, server.api_key) == (
        "openai/qwen2.5-1.5b",
        "http://127.0.0.1:8092/v1",
        NO_KEY,
    )
    alias = resolve_endpoint(_args(model="local/qwen2.5-1.5b"), SETTINGS)
    assert alias.model == "openai/qwen2.5-1.5b" and str(alias.api_base).endswith(":8092/v1")
    hosted_args = _args(model="openai/gpt-4o-mini", structured_output="json_object")
    hosted = resolve_endpoint(hosted_args, SETTINGS)
    assert hosted.api_base is None
    assert auditor_options(hosted_args).structured_output == "json_object"
    monkeypatch.setenv("MY_KEY", "secret")
    assert (
        resolve_endpoint(
            _args(model="anthropic/claude-3-haiku", api_key_env="MY_KEY"), SETTINGS
        ).api_key
        == "secret"
    )
    with pytest.raises(ConfigError):
        resolve_endpoint(_args(model="gpt-4o-mini"), SETTINGS)
    monkeypatch.delenv("MY_KEY")
    with pytest.raises(ConfigError):
        resolve_endpoint(_args(model="openai/x", api_key_env="MY_KEY"), SETTINGS)


async def test_first_stage_report_reads_auditor_results(
    items: list[EvalItem], tmp_path: Path
) -> None:
    from dmt_bench.auditor_eval.first_stage_eval import (
        ScoredItem,
        evaluate_threshold,
        load_flags,
    )
    from dmt_bench.auditor_eval.first_stage_eval import to_markdown as fs_markdown

    subset = select(items, limit=4)
    fake = ScriptedAuditor(lambda c: AuditVerdict.biased("age", score=0.6))
    results = await run_items(fake, subset, progress=lambda _l: None)
    summary = summarize(
        [r.prediction() for r in results], 0.5, domains=DOMAINS, strategies=STRATEGIES
    )
    info = RunInfo(
        model="fake", litellm_model="fake", api_base=None, prompt_version="auditor_v1",
        dataset="auditor_eval_v1", split="all", limit=4, structured_output="none",
        concurrency=2, started_at="2025-01-01T00:00:00Z", wall_s=1.0,
    )  # fmt: skip
    json_path, _ = write_reports(tmp_path, "r", info, summary, results)
    flags, tau = load_flags(json_path)
    assert tau == 0.5 and set(flags) == {i.id for i in subset} and all(flags.values())
    scored = [ScoredItem(item_id=i.id, biased=i.biased, kind=i.kind, score=0.5) for i in subset]
    rows = {"classifier": [evaluate_threshold(scored, 0.65, flags)]}
    doc = {"dataset": "auditor_eval_v1", "split": "all", "n": 4, "n_biased": 2,
           "started_at": "t", "wall_s": 1.0, "defaults": {"classifier": 0.65},
           "auditor_results": str(json_path), "auditor_tau": tau}  # fmt: skip
    text = fs_markdown(doc, rows)
    assert "| 0.65 **(default)** | 1.00" in text
    with pytest.raises(ConfigError):
        load_flags(tmp_path / "r.md")
