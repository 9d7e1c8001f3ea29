"""Kill a real ``dmt-bench run`` process midway (SIGKILL), resume it, lose and repeat nothing.

The run is a real subprocess with the real LangGraph loop and SQLite checkpointer,
talking over HTTP to ``FakeProxy`` (the real proxy app with the shipped scripted
upstream, in this test process, so it outlives the killed run like a real
proxy would). The scripted upstream is slow on purpose, so the kill lands
mid-run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml

from dmt_bench.harness.rundir import Manifest
from dmt_bench.sim.records import read_audits, read_turns
from dmt_bench.sim.stream import read_stream
from dmt_bench.testing.sim import FakeProxy

CONDITIONS = ["baseline", "dmt"]


def run_cli(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "dmt_bench.cli", "run", *args, "--no-progress"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


async def test_killed_run_resumes_without_repeating_or_losing_a_turn(tmp_path: Path) -> None:
    fake = FakeProxy(tmp_path / "proxy-state", delay_s=0.3)
    client = fake.start()
    try:
        config = {
            "name": "resume", "turns": 6, "interval": 3, "memory": ["memory"],
            "conditions": CONDITIONS, "injection": {"rate": 0.0},
            "dib": {"sample": 1, "domains": ["age"], "bootstrap": 20, "permutations": 10},
            "execution": {"proxy_url": client.base_url, "max_retries": 0},
        }  # fmt: skip
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
        out = tmp_path / "run"
        env = {**os.environ, "DMT_ADMIN_KEY": fake.admin_key}
        # ``with``: the killed process's pipes are closed, not left to the garbage collector.
        with run_cli("--config", str(path), "--out", str(out), env=env) as proc:
            deadline = time.monotonic() + 120
            while len(read_turns(out / "memory" / "baseline")) < 2:
                assert proc.poll() is None, proc.communicate()[1][-2000:]
                assert time.monotonic() < deadline, "the run made no progress"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        done_before = len(read_turns(out / "memory" / "baseline"))
        assert done_before < 6, "the kill came too late to test anything"
        assert Manifest.model_validate_json((out / "run.json").read_text()).status == "running"

        with run_cli("--out", str(out), "--resume", env=env) as resumed:
            stdout, stderr = resumed.communicate(timeout=300)
        assert resumed.returncode == 0, stderr[-3000:]
        assert "No mitigation" in stdout

        stream = read_stream(next((out / "streams").glob("*.jsonl")))
        run_id = Manifest.model_validate_json((out / "run.json").read_text()).run_id
        for cond in CONDITIONS:
            turns = read_turns(out / "memory" / cond)
            assert [t.t for t in turns] == [1, 2, 3, 4, 5, 6], cond
            raw = (out / "memory" / cond / "turns.jsonl").read_text().splitlines()
            assert len(raw) <= 7  # at most the turn in flight at the kill is recorded twice
            memories = await client.memories(f"sim-{run_id}-memory-{cond}")
            queries = [m["text"].split("\nAssistant: ")[0] for m in memories]
            assert queries == [f"User: {t.prompt}" for t in stream], "a turn was lost or repeated"
            assert sorted(read_audits(out / "memory" / cond)) == [0, 3, 6]
        # The checkpointer resumed the loop: turns done before the kill were not sent again.
        sent = fake.user_prompts()
        assert len(sent) <= 2 * 6 + 1
        for turn in stream:
            assert 2 <= sent.count(turn.prompt) <= 3
    finally:
        fake.stop()
