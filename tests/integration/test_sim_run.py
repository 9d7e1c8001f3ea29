"""Whole runs in-process: the real proxy app and the real loop, with shipped fakes for models.

``FakeProxy`` serves the real ``create_app`` over loopback HTTP with the shipped
ScriptedChatModel (agent), ScriptedAuditor and in-memory backend; the generator
is the shipped scripted generator. These tests are about the harness (stream
sharing, run directories, resume, reports), not the models' behaviour; the real
models run in tests/e2e/test_sim_e2e.py.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dmt_bench.cli import main
from dmt_bench.harness.rundir import Manifest
from dmt_bench.sim import heatmap_report, report, runner
from dmt_bench.sim.config import SimConfig, parse_config
from dmt_bench.sim.records import read_audits, read_turns
from dmt_bench.sim.stream import read_stream
from dmt_bench.testing.sim import (
    BIAS_MARKER,
    FakeProxy,
    scripted_agent_reply,
    scripted_generator,
)
from dmt_proxy.errors import ConfigError, RunInterrupted, UpstreamError
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import UpstreamCall

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""


@pytest.fixture
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProxy]:
    fake = FakeProxy(tmp_path / "proxy-state")
    fake.start()
    monkeypatch.setenv("DMT_ADMIN_KEY", fake.admin_key)
    yield fake
    fake.stop()


def tiny(proxy: FakeProxy, **extra: Any) -> SimConfig:
    raw: dict[str, Any] = {
        "name": "tiny", "turns": 4, "interval": 2, "memory": ["memory"],
        "conditions": ["baseline", "ssp", "dmt", "ssp+dmt"], "injection": {"rate": 0.5},
        "dib": {"sample": 1, "domains": ["age", "race"], "bootstrap": 50, "permutations": 20},
        "execution": {"proxy_url": proxy.client.base_url, "max_retries": 1},
    }  # fmt: skip
    raw.update(extra)
    return parse_config(raw)


def agent_turns(proxy: FakeProxy) -> list[str]:
    return proxy.user_prompts()


async def test_every_condition_gets_the_identical_stream(proxy: FakeProxy, tmp_path: Path) -> None:
    config = tiny(proxy)
    out = tmp_path / "run"
    results = await runner.run_compare(
        config, out, generator=scripted_generator(), settings=SETTINGS
    )
    stream = read_stream(next((out / "streams").glob("*.jsonl")))
    assert len(stream) == 4 and any(t.injected for t in stream)
    sent = agent_turns(proxy)
    # Conditions run one after another: four blocks of the same four prompts, in order.
    assert len(sent) == 16
    for block in range(4):
        assert sent[block * 4 : block * 4 + 4] == [t.prompt for t in stream]
    # ... and what each condition's memory holds is that same stream, nothing else.
    for cond in config.conditions:
        user = f"sim-{Manifest.model_validate_json((out / 'run.json').read_text()).run_id}-memory-{cond}"
        texts = [m["text"] for m in await proxy.client.memories(user)]
        assert [t.split("\nAssistant: ")[0] for t in texts] == [f"User: {s.prompt}" for s in stream]
    # DMT conditions are audited (tagged where the scripted generator injected), others not.
    for cond, audited in (("baseline", False), ("ssp", False), ("dmt", True), ("ssp+dmt", True)):
        turns = read_turns(out / "memory" / cond)
        assert [t.t for t in turns] == [1, 2, 3, 4]
        for turn, item in zip(turns, stream, strict=True):
            expected = ("tagged" if item.injected else "clean") if audited else "unaudited"
            assert turn.memory_status == expected
    # t=0 measured once per SSP setting and shared; later audits per condition.
    audits = {c: read_audits(out / "memory" / c) for c in config.conditions}
    assert all(sorted(a) == [0, 2, 4] for a in audits.values())
    assert audits["baseline"][0].shared_from is None and audits["dmt"][0].shared_from
    assert audits["ssp"][0].shared_from is None and audits["ssp+dmt"][0].shared_from
    assert audits["dmt"][0].results == audits["baseline"][0].results
    assert audits["baseline"][4].memories == 4 and audits["baseline"][2].memories == 2
    assert [a.condition for a in results.archs[0].deltas] == config.conditions
    assert results.stream.injected == sum(t.injected for t in stream)


async def test_reports_and_call_log(proxy: FakeProxy, tmp_path: Path) -> None:
    out = tmp_path / "run"
    results = await runner.run_compare(
        tiny(proxy), out, generator=scripted_generator(), settings=SETTINGS
    )
    report.write_compare_report(results, out)
    for name in ("results.json", "report.md", "report.html", "agbv_memory.png",
                 "domains_memory.png", "mitigation_heatmap.png"):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    assert "Table 2 shape" in (out / "report.md").read_text()
    # Utility: the scripted agent always answers (A); accuracy is that of the stream's keys.
    utility = {u.condition: u for u in results.archs[0].utility}
    assert set(utility) == set(tiny(proxy).conditions)
    assert all(u.all.n == 4 and u.all.unparsed == 0 for u in utility.values())
    assert "MMLU-Pro accuracy" in (out / "report.md").read_text()
    assert json.loads((out / "results.json").read_text())["results_version"] == "sim-results-v3"
    calls = [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]
    roles = {c["role"] for c in calls}
    assert roles == {"generator", "agent", "dib", "audit"}
    agent = [c for c in calls if c["role"] == "agent"]
    assert len(agent) == 16 and all(c["outcome"] == "ok" and c["response"] for c in agent)
    dib = [c for c in calls if c["role"] == "dib"]
    n = results.dib_decisions
    assert len(dib) == n * (2 + 4 * 2)  # two shared t=0 audits, then t=2 and t=4 per condition
    assert all(c["request"]["messages"] for c in dib)
    assert all(c["outcome"] == "ok" and c["response"] for c in dib)  # logged via the raw reply
    assert results.latency["agent"].n == 16
    # a dry run can price a bigger config with this run's measured latencies
    from dmt_bench.sim.estimate import build_estimate, latencies_from_run

    measured = latencies_from_run(out)
    assert set(measured) == {"generator", "agent", "dib", "audit"}
    est = build_estimate(tiny(proxy, turns=100, interval=20), measured, "run", n)
    assert {r.role: r.latency_source for r in est.roles}["agent"] == "run"
    assert {r.role: r.calls for r in est.roles}["agent"] == 400


async def test_existing_run_dir_is_refused_or_resumed_never_overwritten(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    config = tiny(proxy, conditions=["baseline"])
    out = tmp_path / "run"
    first = await runner.run_compare(config, out, generator=scripted_generator(), settings=SETTINGS)
    before = (out / "memory" / "baseline" / "turns.jsonl").read_text()
    with pytest.raises(ConfigError, match="pass --resume"):
        await runner.run_compare(config, out, generator=scripted_generator(), settings=SETTINGS)
    other = tiny(proxy, conditions=["baseline"], seed=5)
    with pytest.raises(ConfigError, match=r"another config .*seed"):
        await runner.run_compare(
            other, out, resume=True, generator=scripted_generator(), settings=SETTINGS
        )
    calls = len(proxy.chat.calls)
    again = await runner.run_compare(
        config, out, resume=True, generator=scripted_generator(), settings=SETTINGS
    )
    assert len(proxy.chat.calls) == calls  # a complete run is re-reported, not re-run
    assert (out / "memory" / "baseline" / "turns.jsonl").read_text() == before
    assert again.archs == first.archs
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an empty run directory"):
        await runner.run_compare(config, junk, generator=scripted_generator(), settings=SETTINGS)


async def test_upstream_failure_stops_resumably_and_resume_repeats_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = {"on": False}

    def agent(call: UpstreamCall) -> Any:
        if broken["on"] and "Answer with a single integer" not in str(
            call.wire_messages()[-1]["content"]
        ):
            return UpstreamError("the agent model is down", upstream="fake")
        return scripted_agent_reply(call)

    fake = FakeProxy(tmp_path / "state", agent=agent)
    fake.start()
    monkeypatch.setenv("DMT_ADMIN_KEY", fake.admin_key)
    try:
        config = tiny(fake, conditions=["dmt"])
        out = tmp_path / "run"
        broken["on"] = True
        with pytest.raises(RunInterrupted, match="turn 1 of memory/dmt failed"):
            await runner.run_compare(config, out, generator=scripted_generator(), settings=SETTINGS)
        manifest = json.loads((out / "run.json").read_text())
        assert manifest["status"] == "stopped" and "turn 1" in manifest["message"]
        assert sorted(read_audits(out / "memory" / "dmt")) == [0] and not read_turns(
            out / "memory" / "dmt"
        )
        broken["on"] = False
        await runner.run_compare(
            config, out, resume=True, generator=scripted_generator(), settings=SETTINGS
        )
        assert [t.t for t in read_turns(out / "memory" / "dmt")] == [1, 2, 3, 4]
        assert len(fake.user_prompts()) == 4 + 2  # 4 turns + the failed turn's 2 tries
        assert json.loads((out / "run.json").read_text())["status"] == "complete"
    finally:
        fake.stop()


async def test_ablation_conditions_run_and_each_gets_its_mp(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    conditions = ["baseline", "ssp", "dmt", "dmt-tags", "dmt-instruction"]
    config = tiny(proxy, conditions=conditions)
    out = tmp_path / "run"
    results = await runner.run_compare(
        config, out, generator=scripted_generator(), settings=SETTINGS
    )
    stream = read_stream(next((out / "streams").glob("*.jsonl")))
    # dmt-tags is audited like dmt; dmt-instruction shows the instruction, audits nothing
    for cond, audited in (("dmt-tags", True), ("dmt-instruction", False)):
        for turn, item in zip(read_turns(out / "memory" / cond), stream, strict=True):
            expected = ("tagged" if item.injected else "clean") if audited else "unaudited"
            assert turn.memory_status == expected, cond
    rows = {d.condition: d for d in results.archs[0].deltas}
    assert list(rows) == conditions
    assert rows["baseline"].mp is None and all(rows[c].mp is not None for c in conditions[1:])
    assert set(rows["dmt-tags"].readouts) == {"expected", "written"}
    table = report.table2_rows(results)
    assert table[0][2:] == ["No mitigation", "SSP", "DMT", "DMT tags only", "DMT instruction only"]
    # two DIB contexts per domain (dib-sample-v2): every domain has its own CI
    assert results.archs[0].contexts == {"race": 2, "age": 2}
    assert all(
        math.isfinite(c.ci.low) for c in rows["dmt"].readouts["expected"].per_domain.values()
    )


async def test_heatmap_small_with_fakes(proxy: FakeProxy, tmp_path: Path) -> None:
    config = tiny(proxy, kind="heatmap", conditions=["baseline"], heatmap_sources=["age", "race"],
                  injection={"rate": 1.0})  # fmt: skip
    out = tmp_path / "heat"
    results = await runner.run_heatmap(
        config, out, generator=scripted_generator(), settings=SETTINGS
    )
    assert results.t == 4 and set(results.matrix) == {"age", "race"}
    assert set(results.matrix["age"]) == {"age", "race"} and results.finite_off_diagonal == 2
    streams = {p.name: read_stream(p) for p in (out / "streams").glob("*.jsonl")}
    assert set(streams) == {"single-age.jsonl", "single-race.jsonl"}
    age, race = streams["single-age.jsonl"], streams["single-race.jsonl"]
    assert [t.question_id for t in age] == [t.question_id for t in race]
    assert all(BIAS_MARKER in t.prompt for t in age + race)
    t0 = [read_audits(out / "memory" / f"src-{s}")[0] for s in ("age", "race")]
    assert t0[0].results == t0[1].results and t0[1].shared_from
    heatmap_report.write_heatmap_report(results, out)
    assert (out / "heatmap.png").stat().st_size > 0
    text = heatmap_report.render_heatmap_text(results)
    assert "positive off-diagonal cells" in text and "written integer" in text
    assert set(results.readouts) == {"expected", "written"}
    assert results.contexts == {"age": 2, "race": 2}
    cell = results.readouts["expected"].matrix["age"]["race"]
    assert cell.value == results.matrix["age"]["race"] and math.isfinite(cell.ci.low)
    assert "paired 95% CI" in (out / "report.md").read_text()


def test_cli_compare_through_a_running_proxy(
    proxy: FakeProxy, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "cli"
    args = ["compare", "--ssp", "--dmt", "--memory", "memory", "--turns", "2", "--interval", "2",
            "--lambda", "0", "--dib-sample", "1", "--dib-domains", "age,gender",
            "--proxy-url", proxy.client.base_url, "--out", str(out), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "No mitigation" in captured.out and "SSP" in captured.out and "DMT" in captured.out
    assert "memory  2 (t80, T)" in captured.out
    assert main(args) == 2  # the directory exists now
    assert "pass --resume" in capsys.readouterr().err
    assert main(["run", "--out", str(out), "--resume", "--no-progress",
                 "--proxy-url", proxy.client.base_url]) == 0  # fmt: skip


async def test_a_turn_that_reached_the_proxy_before_a_crash_is_recovered_not_resent(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    import openai

    from dmt_bench.sim.calllog import CallLog
    from dmt_bench.sim.loop import LoopDeps, Thread, run_turn
    from dmt_bench.sim.stream import StreamTurn
    from dmt_proxy.policy import Mode

    turn = StreamTurn(t=1, question_id=1, category="math", answer="A", prompt="What is 2+2?",
                      inject=False, domain=None, injected=False)  # fmt: skip
    thread = Thread(arch="memory", condition="dmt", mode=Mode.DMT, user="crash-user",
                    dir=tmp_path / "thread")  # fmt: skip
    deps = LoopDeps(proxy=proxy.client, model="local/qwen2.5-0.5b", stream=[turn], checkpoints=[0],
                    samples=[], scoring=runner.scoring_config(tiny(proxy)), log=CallLog(None),
                    max_tokens=16, temperature=0.0, seed=0, dib_concurrency=1,
                    request_timeout_s=30, max_retries=0, drain_timeout_s=30)  # fmt: skip
    # The crashed run's request: it reached the proxy, which answered and stored it.
    client = openai.AsyncOpenAI(base_url=proxy.client.base_url, api_key="x",
                                default_headers={"X-DMT-User": "crash-user", "X-DMT-Mode": "dmt"})  # fmt: skip
    await client.chat.completions.create(model="local/qwen2.5-0.5b",
                                         messages=[{"role": "user", "content": turn.prompt}])  # fmt: skip
    await client.close()
    calls = len(proxy.chat.calls)
    record = await run_turn(thread, deps, 1)
    assert record.recovered and record.reply == "The answer is (A)."
    assert record.memory_status == "clean"
    assert len(proxy.chat.calls) == calls
    assert len(await proxy.client.memories("crash-user")) == 1
