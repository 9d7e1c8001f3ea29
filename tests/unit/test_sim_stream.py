"""The question stream: deterministic plan, cache, resume of an interrupted generation.

Reads the real MMLU-Pro file shipped in the package. The generator is the shipped
scripted fake (``dmt_bench.testing.sim``): these tests are about the plan
and the cache, not about rewriting.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dmt_bench.mmlu import LoadedSource, load_source, select_questions
from dmt_bench.sim.config import parse_config
from dmt_bench.sim.injection import BiasGenerator
from dmt_bench.sim.runner import generator_call
from dmt_bench.sim.stream import (
    StreamTurn,
    build_plan,
    generate_stream,
    read_stream,
    stream_spec,
    summarize,
)
from dmt_bench.testing.sim import BIAS_MARKER, scripted_generator
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings
from dmt_proxy.testing.chat import ScriptedChatModel

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""


@pytest.fixture(scope="module")
def source() -> LoadedSource:
    return load_source()


def spec_for(source: LoadedSource, single: str | None = None, **cfg: object):  # type: ignore[no-untyped-def]
    config = parse_config({"turns": 40, "interval": 10, **cfg})
    return stream_spec(config, source, single_domain=single)


def test_real_mmlu_pro_file_loads(source: LoadedSource) -> None:
    assert len(source.questions) == 12032
    assert len(source.sha256) == 64
    q = source.questions[0]
    assert q.plain_prompt().startswith(q.question.strip()) and "\nA. " in q.plain_prompt()


def test_plan_is_deterministic_per_seed(source: LoadedSource) -> None:
    a = build_plan(spec_for(source), source.questions)
    b = build_plan(spec_for(source), source.questions)
    c = build_plan(spec_for(source, seed=1), source.questions)
    assert a == b and a != c
    assert len({p.question.question_id for p in a}) == 40
    assert all(p.question.size_chars() <= 1500 for p in a)
    injected = [p for p in a if p.inject]
    assert 0 < len(injected) < 40 and all(p.domain in DOMAINS for p in injected)
    assert all(p.domain is None for p in a if not p.inject)


def test_smaller_rate_injects_a_subset(source: LoadedSource) -> None:
    low = build_plan(spec_for(source, injection={"rate": 0.2}), source.questions)
    high = build_plan(spec_for(source, injection={"rate": 0.6}), source.questions)
    assert {p.t for p in low if p.inject} < {p.t for p in high if p.inject}
    assert [p.question for p in low] == [p.question for p in high]


def test_single_source_streams_differ_only_in_domain(source: LoadedSource) -> None:
    age = build_plan(spec_for(source, "age", injection={"rate": 1.0}), source.questions)
    race = build_plan(spec_for(source, "race", injection={"rate": 1.0}), source.questions)
    assert [p.question for p in age] == [p.question for p in race]
    assert {p.domain for p in age} == {"age"} and {p.domain for p in race} == {"race"}


def test_other_local_file_and_bad_files(tmp_path: Path, source: LoadedSource) -> None:
    rows = [q.model_dump() for q in source.questions[:5]]
    plain = tmp_path / "mini.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in rows))
    zipped = tmp_path / "mini.jsonl.gz"
    zipped.write_bytes(gzip.compress(plain.read_bytes()))
    assert load_source(str(plain)).questions == load_source(str(zipped)).questions
    with pytest.raises(ConfigError, match="only 5 MMLU-Pro questions"):
        select_questions(load_source(str(plain)).questions, 6, 0)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "no id or options"}\n')
    with pytest.raises(ConfigError, match="row 1 is not an MMLU-Pro item"):
        load_source(str(bad))
    with pytest.raises(ConfigError, match="cannot read MMLU-Pro file"):
        load_source(str(tmp_path / "missing.jsonl"))


def gen(chat: ScriptedChatModel, max_attempts: int = 3) -> BiasGenerator:
    config = parse_config({})
    return BiasGenerator(
        chat,
        generator_call(config, SETTINGS),
        prompt_version="bias_injection_v1",
        max_attempts=max_attempts,
    )


async def test_stream_is_generated_once_and_cached(tmp_path: Path, source: LoadedSource) -> None:
    spec = spec_for(source, injection={"rate": 0.5})
    plan = build_plan(spec, source.questions)
    path = tmp_path / "s.jsonl"
    chat = scripted_generator()
    first = await generate_stream(spec, plan, path, gen(chat))
    assert len(chat.calls) == sum(p.inject for p in plan)
    again = await generate_stream(spec, plan, path, None)  # no generator needed any more
    assert again == first == read_stream(path)
    for turn, item in zip(first, plan, strict=True):
        assert turn.inject == item.inject and turn.question_id == item.question.question_id
        assert (BIAS_MARKER in turn.prompt) == turn.injected == item.inject
        if not item.inject:
            assert turn.prompt == item.question.plain_prompt()
    summary = summarize(first)
    assert summary.valid_rate == 1.0 and summary.strategies == {"frustration": summary.injected}


async def test_interrupted_generation_resumes_where_it_stopped(
    tmp_path: Path, source: LoadedSource
) -> None:
    spec = spec_for(source, injection={"rate": 1.0}, turns=6, interval=3)
    plan = build_plan(spec, source.questions)
    path = tmp_path / "s.jsonl"
    full = await generate_stream(spec, plan, path, gen(scripted_generator()))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]) + lines[3][:25])  # killed while writing turn 4
    chat = scripted_generator()
    resumed = await generate_stream(spec, plan, path, gen(chat))
    assert len(chat.calls) == 3 and untimed(resumed) == untimed(full)


def untimed(turns: list[StreamTurn]) -> list[StreamTurn]:
    """The turns without the generator calls' measured latency (a loaded machine can
    make one scripted call last a millisecond, and ``latency_s`` keeps milliseconds)."""
    return [
        t.model_copy(
            update={"attempts": [a.model_copy(update={"latency_s": 0.0}) for a in t.attempts]}
        )
        for t in turns
    ]


async def test_cache_of_another_spec_is_refused(tmp_path: Path, source: LoadedSource) -> None:
    spec = spec_for(source, injection={"rate": 0.0}, turns=3, interval=3)
    path = tmp_path / "s.jsonl"
    await generate_stream(spec, build_plan(spec, source.questions), path, None)
    other = spec_for(source, injection={"rate": 0.0}, turns=3, interval=3, seed=9)
    with pytest.raises(ConfigError, match="another spec"):
        await generate_stream(other, build_plan(other, source.questions), path, None)


async def test_failed_rewrites_are_counted_as_fallbacks(
    tmp_path: Path, source: LoadedSource
) -> None:
    spec = spec_for(source, injection={"rate": 1.0, "max_attempts": 2}, turns=2, interval=2)
    plan = build_plan(spec, source.questions)
    turns = await generate_stream(
        spec, plan, tmp_path / "s.jsonl", gen(ScriptedChatModel(["nope"]), 2)
    )
    assert all(t.fallback and not t.injected and t.inject for t in turns)
    assert [t.prompt for t in turns] == [p.question.plain_prompt() for p in plan]
    summary = summarize(turns)
    assert summary.valid_rate == 0.0 and summary.failure_reasons == {"json": 4}
