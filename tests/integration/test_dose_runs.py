"""``dmt-bench dose`` whole runs and resume, through ``FakeProxy`` over loopback HTTP.

Config, seeds, cell bookkeeping and statistics are ``tests/unit/test_dose.py``. Whole
runs go through ``FakeProxy``: the real proxy app over loopback HTTP with the
shipped ScriptedChatModel (agent), ScriptedAuditor and in-memory backend. The
agent here is scripted to lower some groups' scores by a fixed amount per biased
memory it is shown, unless the DMT instruction is shown too; so the design's
numbers (diagonal, off-diagonal, MP, content) have known signs. These tests are
about the harness and its statistics, not the models; the real models run in
tests/e2e/test_dose_e2e.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dmt_bench.auditor_eval.dataset import EvalItem
from dmt_bench.cli import main
from dmt_bench.dose import cells as c
from dmt_bench.dose import estimate, report
from dmt_bench.dose.config import DoseConfig, parse_dose_config
from dmt_bench.dose.results import build_results, find_row
from dmt_bench.dose.runner import run_dose
from dmt_bench.dose.seeds import biased_order
from dmt_bench.harness.rundir import Manifest
from dmt_bench.testing.sim import BIAS_MARKER, FakeProxy, scripted_agent_reply
from dmt_proxy.errors import ConfigError
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import UpstreamCall

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""


# ---------------------------------------------------------------- whole runs (fake)

MARKED = [
    EvalItem(id=f"age-frustration-{i}", text=f"Seed {i}: {BIAS_MARKER} slow. Question {i}?",
             label="biased", kind="injected", domain="age", strategy="frustration",
             split="train")
    for i in range(1, 4)
] + [
    EvalItem(id=f"mmlu-{i}", text=f"Plain question {i}?", label="neutral", kind="mmlu",
             split="train")
    for i in range(1, 4)
]  # fmt: skip


def dmt_aware_agent(call: UpstreamCall) -> str:
    """The shipped scripted agent, except that the DMT instruction cancels the penalty."""
    system = " ".join(
        str(m.get("content", "")) for m in call.wire_messages() if m["role"] == "system"
    )
    if "personal opinion, not as evidence" in system:
        user = next(m["content"] for m in reversed(call.wire_messages()) if m["role"] == "user")
        if "Answer with a single integer" in str(user):
            return str(50 + zlib.crc32(str(user).encode()) % 7)
    return scripted_agent_reply(call)


@pytest.fixture
def proxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeProxy]:
    fake = FakeProxy(tmp_path / "proxy-state", agent=dmt_aware_agent, retrieval="recent")
    fake.start()
    monkeypatch.setenv("DMT_ADMIN_KEY", fake.admin_key)
    yield fake
    fake.stop()


def tiny(proxy: FakeProxy, **extra: Any) -> DoseConfig:
    raw: dict[str, Any] = {
        "name": "tiny", "sources": ["age"], "doses": [0, 1, 3], "memory": "memory",
        "modes": ["off", "dmt", "dmt-tags", "dmt-instruction"],
        "dib": {"contexts_per_domain": 2, "domains": ["age", "race"], "bootstrap": 100,
                "permutations": 50},
        "execution": {"proxy_url": proxy.client.base_url, "max_retries": 1},
    }  # fmt: skip
    raw.update(extra)
    return parse_dose_config(raw)


def decisions_asked(proxy: FakeProxy) -> int:
    return sum(
        "Answer with a single integer" in str(call.wire_messages()[-1]["content"])
        for call in proxy.chat.calls
    )


async def test_whole_run_seeds_reads_reports_and_a_rerun_asks_nothing(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    config = tiny(proxy)
    out = tmp_path / "run"
    run = await run_dose(config, out, settings=SETTINGS, progress=None, items=MARKED)
    # Seeds went in through the admin API: the agent was asked DIB decisions only.
    per_cell = len(run.samples)
    assert per_cell == 2 * 3 + 2 * 4
    assert decisions_asked(proxy) == len(proxy.chat.calls) == per_cell * len(c.audits(config))
    age3 = c.read_scope(out, c.ScopeKey(source="age", kind="biased", k=3))
    assert age3 is not None and age3.tagged == 3 and age3.write_mode == "dmt"
    assert [m.seed_id for m in age3.memories] == [s.id for s in biased_order(MARKED, "age", 0)]
    neutral = c.read_scope(out, c.ScopeKey(source=None, kind="neutral", k=3))
    assert neutral is not None and neutral.tagged == 0 and neutral.write_mode == "off"
    records = c.read_cells(out, config)
    assert len(records) == len(c.cells(config))
    held = {cell.scope.name: rec.memories for cell, rec in records.items()}
    assert held == {"empty": 0, "age-biased-k1": 1, "age-biased-k3": 3, "any-neutral-k1": 1,
                    "any-neutral-k3": 3}  # fmt: skip

    scopes = [s for s in (c.read_scope(out, k) for k in c.scopes(config)) if s]
    results = build_results(config, records, scopes)
    rows = results.readouts["expected"].rows
    off3 = find_row(rows, c.ScopeKey(source="age", kind="biased", k=3), "off")
    dmt3 = find_row(rows, c.ScopeKey(source="age", kind="biased", k=3), "dmt")
    assert off3 is not None and dmt3 is not None
    assert off3.diagonal is not None and off3.diagonal.defined
    assert off3.diagonal.value > 0  # the penalty hits some age groups: the gap grows
    assert dmt3.diagonal is not None and dmt3.diagonal.value == pytest.approx(0.0, abs=1e-9)
    assert dmt3.mp_diagonal is not None and dmt3.mp_diagonal.value == pytest.approx(-100.0)
    assert off3.mean_shift.defined and off3.mean_shift.value < 0
    # The ablations: this agent heeds the instruction, not the tags.
    key3 = c.ScopeKey(source="age", kind="biased", k=3)
    tags3, instr3 = find_row(rows, key3, "dmt-tags"), find_row(rows, key3, "dmt-instruction")
    assert tags3 is not None and tags3.diagonal is not None and tags3.tagged == 3
    assert tags3.diagonal.defined and tags3.diagonal.value > 0
    assert instr3 is not None and instr3.diagonal is not None
    assert instr3.diagonal.value == pytest.approx(0.0, abs=1e-9)
    assert instr3.mp_diagonal is not None and instr3.mp_diagonal.value == pytest.approx(-100.0)
    # The power line: an MDE for the diagonal, ΔAGBV and each mode against off.
    assert off3.diagonal_mde is not None and off3.diagonal_mde >= 0
    assert off3.agbv_mde is not None and dmt3.mde_vs_off is not None
    written3 = find_row(results.readouts["written"].rows, key3, "dmt-tags")
    assert written3 is not None and written3.diagonal is not None
    # Every decision reports, through the proxy's header, that it saw all k memories.
    assert results.shown_counted == per_cell * len(c.audits(config))
    assert results.shown_short == 0
    text = report.render_text(results)
    assert f"all k in {results.shown_counted} of {results.shown_counted} decisions" in text
    for needed in ("[expected value]", "[written integer]", "MDE diagonal ΔGBV", "dmt-tags",
                   "dmt-instruction", "Headline readout: the expected value"):  # fmt: skip
        assert needed in text, needed
    report.write_report(results, out)
    for name in ("results.json", "report.md", "report.html", "dose_response.png"):
        assert (out / name).exists(), name

    rates, label = estimate.latencies(config, out, live=False, settings=SETTINGS)
    assert label == f"run {out}" and rates["dib"] > 0 and rates["audit"] >= 0
    done = estimate.build(config, out, rates, label)
    assert done.cells_todo == 0 and done.seed_writes == 0 and done.total_hours == 0

    before = len(proxy.chat.calls)
    await run_dose(config, out, resume=True, settings=SETTINGS, progress=None, items=MARKED)
    assert len(proxy.chat.calls) == before  # everything on disk: nothing asked again
    assert Manifest.model_validate_json((out / "run.json").read_text()).status == "complete"


async def test_a_new_run_refuses_a_used_directory_and_another_config(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    await run_dose(
        tiny(proxy, modes=["off"], doses=[0, 1]),
        out,
        settings=SETTINGS,
        progress=None,
        items=MARKED,
    )
    with pytest.raises(ConfigError, match="pass --resume"):
        await run_dose(
            tiny(proxy, modes=["off"], doses=[0, 1]), out, settings=SETTINGS, progress=None
        )
    with pytest.raises(ConfigError, match="another config"):
        await run_dose(
            tiny(proxy, modes=["off"], doses=[0, 3]),
            out,
            resume=True,
            settings=SETTINGS,
            progress=None,
        )


async def test_seeding_resumes_without_duplicating_memories(
    proxy: FakeProxy, tmp_path: Path
) -> None:
    config = tiny(proxy, modes=["off"], kinds=["biased"])
    out = tmp_path / "run"
    from dmt_bench.dose.runner import DoseRun

    run = DoseRun(config, out, resume=False, progress=None, items=MARKED)
    scope = c.ScopeKey(source="age", kind="biased", k=3)
    # A killed session had written one of the three seeds and no record.
    first = run.seeds(scope)[0]
    await proxy.client.add_memory(run.user(scope), first.text, mode="off")
    records = await run.seed_all(proxy.client)
    assert len(records["age-biased-k3"].memories) == 3
    assert len(await proxy.client.memories(run.user(scope))) == 3
    # A stranger's memory in the scope is refused, never counted as a seed.
    other = c.ScopeKey(source="age", kind="biased", k=1)
    (out / "scopes" / "age-biased-k1.json").unlink()
    await proxy.client.add_memory(run.user(other), "not a seed", mode="off")
    with pytest.raises(ConfigError, match="not its seeds"):
        await run.seed_all(proxy.client)


def run_cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dmt_bench.cli", "dose", *args],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_killed_run_resumes_where_it_stopped(tmp_path: Path) -> None:
    """A real ``dmt-bench dose`` process, SIGKILLed after its first cell, then resumed."""
    fake = FakeProxy(tmp_path / "proxy-state", delay_s=0.05, retrieval="recent")
    client = fake.start()
    try:
        config = {
            "kind": "dose", "name": "resume", "sources": ["age"], "doses": [0, 1],
            "memory": "memory", "modes": ["off", "dmt"], "kinds": ["biased"],
            "dib": {"contexts_per_domain": 2, "domains": ["age"], "bootstrap": 20,
                    "permutations": 10},
            "execution": {"proxy_url": client.base_url, "max_retries": 0,
                          "dib_concurrency": 1},
        }  # fmt: skip
        path = tmp_path / "dose.yaml"
        path.write_text(yaml.safe_dump(config))
        out = tmp_path / "run"
        env = {**os.environ, "DMT_ADMIN_KEY": fake.admin_key}
        # ``with``: the killed process's pipes are closed, not left to the garbage collector.
        with run_cli("--config", str(path), "--out", str(out), env=env) as proc:
            deadline = time.monotonic() + 120
            while not (out / "cells").exists() or not list((out / "cells").glob("*/*.json")):
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        written = sorted(p.name for p in (out / "cells").glob("*/*.json"))
        assert 1 <= len(written) < 3, written
        asked_before = len(fake.chat.calls)

        with run_cli("--out", str(out), "--resume", env=env) as resumed:
            stdout, stderr = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, stderr[-3000:]
        assert "Dose–response" in stdout and "cost estimate" in stderr
        parsed = parse_dose_config(Manifest.model_validate_json((out / "run.json").read_text())
                                   .config)  # fmt: skip
        assert len(c.read_cells(out, parsed)) == len(c.cells(parsed))
        per_cell = 2 * 3
        # Only the cells missing at the kill were asked again (plus the one in flight).
        assert len(fake.chat.calls) - asked_before <= (3 - len(written)) * per_cell
        assert (out / "report.md").exists()
        assert main(["dose-report", "--out", str(out)]) == 0
    finally:
        fake.stop()
