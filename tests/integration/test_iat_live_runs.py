"""``dmt-bench iat-drift --run`` over a real compare run, through loopback HTTP.

The compare run is a real ``run_compare`` through ``FakeProxy`` (the real proxy app
with the shipped ScriptedChatModel upstream, in-memory backend and scripted
auditor; none of them is a language model). The scripted agent below answers
IAT prompts stereotypically exactly when its retrieved memory holds the fake
generator's bias marker without an auditor's tag, so the expected scores are
known: only ``baseline@T`` is stereotypical. The managed-proxy test starts a
real ``dmt-proxy serve`` whose upstream is that fake proxy. Error
paths: tests/unit/test_iat_live.py. Real models: tests/e2e.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from dmt_bench.cli import main as bench_main
from dmt_bench.iat.live_plan import (
    CompareRun,
    choose_conditions,
    load_compare_run,
    plan_targets,
)
from dmt_bench.iat.prompts import explicit_prompt, implicit_prompt
from dmt_bench.iat.results import read_result
from dmt_bench.iat.stimuli import load_stimuli
from dmt_bench.iat.templates import VARIANTS
from dmt_bench.iat.trials import TrialPlan, make_plans
from dmt_bench.sim import runner
from dmt_bench.sim.config import parse_config
from dmt_bench.testing.sim import (
    BIAS_MARKER,
    FakeProxy,
    scripted_agent_reply,
    scripted_generator,
)
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, Scope, with_audit
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.upstream.base import UpstreamCall
from tests.unit.test_iat_live import fabricated_run

SETTINGS = Settings()
"""Default proxy settings, as ``dmt-bench`` passes its commands (no environment read)."""

PROBE = ["--runs", "1", "--templates", "1", "--categories", "race", "--concurrency", "2"]
PLANS: dict[str, tuple[TrialPlan, str]] = {}
for _plan in make_plans(
    [load_stimuli().get("race")], 1, 0, [v for v in VARIANTS if v.template == 1]
):
    PLANS[implicit_prompt(_plan)] = (_plan, "implicit")
    PLANS[explicit_prompt(_plan)] = (_plan, "explicit")


def iat_answer(plan: TrialPlan, test: str, stereotypical: bool) -> str:
    """A valid answer, stereotype-consistent or the opposite."""
    if test == "explicit":
        return json.dumps({"choice": "agree" if stereotypical else "disagree", "reason": "fake"})
    pair = (plan.stimuli_a[0], plan.stimuli_b[0])
    if plan.swapped:  # the first mask sits next to attr_y
        pair = (pair[1], pair[0])
    if not stereotypical:
        pair = (pair[1], pair[0])
    return json.dumps({"mask1": pair[0], "mask2": pair[1]})


def agent(call: UpstreamCall) -> str:
    """IAT: stereotypical iff an untagged biased memory was retrieved; else the sim's fake."""
    user = next(str(m["content"]) for m in reversed(call.wire_messages()) if m["role"] == "user")
    if user in PLANS:
        system = " ".join(str(m["content"]) for m in call.wire_messages() if m["role"] == "system")
        biased = BIAS_MARKER in system and '"bias_tag"' not in system
        return iat_answer(*PLANS[user], stereotypical=biased)
    reply = scripted_agent_reply(call)
    # words the IAT prompts share, so keyword retrieval finds these memories for them
    return reply if reply[0].isdigit() else f"{reply} Reply with one JSON object only."


def iat_calls(fake: FakeProxy) -> list[UpstreamCall]:
    last = [
        next(m for m in reversed(c.wire_messages()) if m["role"] == "user") for c in fake.chat.calls
    ]
    return [c for c, m in zip(fake.chat.calls, last, strict=True) if m["content"] in PLANS]


@dataclass
class Run:
    fake: FakeProxy
    dir: Path
    run_id: str


@pytest.fixture(scope="module")
def compare_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """A two-turn compare run (baseline, dmt; every turn injected) through the fake proxy."""
    base = tmp_path_factory.mktemp("live")
    fake = FakeProxy(base / "proxy-state", agent=agent)
    fake.start()
    config = parse_config(
        {
            "name": "tiny",
            "turns": 2,
            "interval": 2,
            "memory": ["memory"],
            "conditions": ["baseline", "dmt"],
            "injection": {"rate": 1.0},
            "dib": {"sample": 1, "domains": ["age"], "bootstrap": 20, "permutations": 20},
            "execution": {"proxy_url": fake.client.base_url, "max_retries": 1},
        }
    )
    out = base / "run"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("DMT_ADMIN_KEY", fake.admin_key)
        asyncio.run(
            runner.run_compare(config, out, generator=scripted_generator(), settings=SETTINGS)
        )
    manifest = json.loads((out / "run.json").read_text())
    yield Run(fake, out, manifest["run_id"])
    fake.stop()


@pytest.fixture
def admin(compare_run: Run, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.setenv("DMT_ADMIN_KEY", compare_run.fake.admin_key)
    return compare_run


def sc(out: Path, probe: str, test: str) -> float | None:
    score = read_result(out / probe / "iat_result.json").score("race", test)  # type: ignore[arg-type]
    assert score is not None
    return score.sc.value


def test_live_drift_over_the_runs_memory(
    admin: Run, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake, out = admin.fake, tmp_path / "drift"
    before = len(iat_calls(fake))
    code = bench_main(["iat-drift", "--run", str(admin.dir), "--out", str(out), *PROBE])
    assert code == 0
    # three probes (t0 shared by baseline and dmt: same SSP setting, empty memory) x 4 trials
    assert len(iat_calls(fake)) - before == 12
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [
        "baseline_T",
        "baseline_t0",
        "dmt_T",
    ]
    assert sc(out, "baseline_t0", "implicit") == 0.0
    assert sc(out, "baseline_T", "implicit") == 1.0 and sc(out, "baseline_T", "explicit") == 1.0
    assert sc(out, "dmt_T", "implicit") == 0.0  # the same memories, tagged by the auditor
    # each probe went as its user, read-only, in its condition's mode
    for probe, user, mode in (
        ("baseline_t0", f"iat-t0-{admin.run_id}-memory-plain", "off"),
        ("baseline_T", f"sim-{admin.run_id}-memory-baseline", "off"),
        ("dmt_T", f"sim-{admin.run_id}-memory-dmt", "dmt"),
    ):
        config = read_result(out / probe / "iat_result.json").config
        assert (config.user, config.memory, config.mode) == (user, "read-only", mode)
    # nothing was written: t0 users stay empty, the simulated users keep their two memories
    client = fake.client
    assert asyncio.run(client.memories(f"iat-t0-{admin.run_id}-memory-plain")) == []
    assert len(asyncio.run(client.memories(f"sim-{admin.run_id}-memory-baseline"))) == 2

    report = json.loads((out / "live_report.json").read_text())
    labels = [t["target"]["label"] for t in report["targets"]]
    assert labels == ["baseline@t0", "baseline@T", "dmt@t0", "dmt@T"]
    assert [t["target"]["mode"] for t in report["targets"]] == ["off", "off", "dmt", "dmt"]
    memories = {t["target"]["label"]: t["memories"] for t in report["targets"]}
    assert memories["baseline@T"] == {"total": 2, "tagged": 0, "pending": 0}
    assert memories["dmt@T"] == {"total": 2, "tagged": 2, "pending": 0}
    assert memories["dmt@t0"]["total"] == 0
    drift = json.loads((out / "drift.json").read_text())
    assert drift["baseline"] == "baseline@t0" and drift["labels"] == labels
    imp = {e["label"]: e for e in drift["entries"] if e["test"] == "implicit"}
    assert imp["baseline@T"]["difference"]["value"] == 1.0
    assert imp["baseline@T"]["flips"] == {"n_paired": 2, "to_stereotype": 2, "from_stereotype": 0}
    assert imp["dmt@t0"]["difference"]["value"] == 0.0
    assert imp["dmt@T"]["difference"]["value"] == 0.0
    assert set(report["per_condition"]) == {"baseline", "dmt"}
    assert report["per_condition"]["dmt"]["baseline"] == "dmt@t0"

    printed = capsys.readouterr().out
    assert "Change vs baseline 'baseline@t0'" in printed and "dmt, t0 -> T:" in printed
    md = (out / "drift.md").read_text()
    assert "## t0 -> T per condition" in md and "answered by baseline_t0" in md


def test_resume_reuses_finished_and_logged_trials(admin: Run, tmp_path: Path) -> None:
    fake, out = admin.fake, tmp_path / "drift"
    args = ["iat-drift", "--run", str(admin.dir), "--out", str(out), *PROBE]
    assert bench_main(args) == 0
    first = json.loads((out / "drift.json").read_text())
    assert bench_main(args) == 2  # the directory holds a run: --resume or another --out
    # an interrupted probe: no result yet, half its trials logged
    (out / "dmt_T" / "iat_result.json").unlink()
    log = out / "dmt_T" / "iat_trials.jsonl"
    log.write_text("".join(log.read_text().splitlines(keepends=True)[:2]))
    before = len(iat_calls(fake))
    assert bench_main([*args, "--resume"]) == 0
    assert len(iat_calls(fake)) - before == 2
    assert json.loads((out / "drift.json").read_text()) == first
    # everything finished: no proxy is needed, the memory counts are kept
    before = len(iat_calls(fake))
    assert bench_main([*args, "--resume", "--concurrency", "1"]) == 0
    assert len(iat_calls(fake)) == before
    report = json.loads((out / "live_report.json").read_text())
    assert report["targets"][1]["memories"]["total"] == 2
    # other probe settings are another experiment
    assert bench_main([*args[:-8], "--runs", "2", "--categories", "race", "--resume"]) == 2


def test_conditions_and_share_t0_targets(compare_run: Run) -> None:
    run = load_compare_run(compare_run.dir)
    assert choose_conditions(run, None) == ("baseline", "dmt")
    config = run.config.model_copy(update={"conditions": ["baseline", "ssp", "dmt", "ssp+dmt"]})
    full = CompareRun(dir=run.dir, run_id="r1", digest="", config=config)
    shared = plan_targets(full, "mem0", ["baseline", "ssp", "dmt", "ssp+dmt"], share_t0=True)
    probes = {t.label: (t.user, t.probe, t.shared) for t in shared}
    assert probes["dmt@t0"] == ("iat-t0-r1-mem0-plain", "baseline_t0", True)
    assert probes["ssp@t0"] == ("iat-t0-r1-mem0-ssp", "ssp_t0", False)
    assert probes["ssp+dmt@t0"] == ("iat-t0-r1-mem0-ssp", "ssp_t0", True)
    assert probes["ssp+dmt@T"] == ("sim-r1-mem0-ssp+dmt", "ssp+dmt_T", False)
    own = plan_targets(full, "mem0", ["dmt", "baseline"], share_t0=False)
    assert [t.label for t in own] == ["dmt@t0", "dmt@T", "baseline@t0", "baseline@T"]
    assert {t.user for t in own if t.point == "t0"} == {
        "iat-t0-r1-mem0-dmt",
        "iat-t0-r1-mem0-baseline",
    }
    assert not any(t.shared for t in own)


def _write_store(state: Path, run_id: str) -> None:
    """The final memory of a compare run, written with the real in-memory backend."""

    async def write() -> None:
        backend = InMemoryBackend(snapshot=state / "memory" / "memory" / "snapshot.json")
        text = f"{BIAS_MARKER} slow things down. Reply with one JSON object only."
        tag = BiasTag(bias_type="age", target_group="a group", tendency="against", score=0.9)
        for cond, status in (("baseline", AuditStatus.UNAUDITED), ("dmt", AuditStatus.TAGGED)):
            scope = Scope(user=f"sim-{run_id}-memory-{cond}")
            record = MemoryRecord.from_interaction(scope, text, "The answer is (A).")
            await backend.write(scope, with_audit(record, status, tag if cond == "dmt" else None))
        await backend.close()

    (state / "memory" / "memory").mkdir(parents=True)
    asyncio.run(write())


def test_managed_proxy_over_a_copy_of_the_runs_state(
    compare_run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the managed proxy's agent is an OpenAI-compatible route to the fake proxy's scripted model
    agent_spec = {
        "model": "openai/local/qwen2.5-0.5b",
        "api_base": compare_run.fake.client.base_url,
    }
    run = fabricated_run(tmp_path, models={"agent": agent_spec, "auditor": agent_spec})
    state = run / "memory" / "proxy" / "state"
    _write_store(state, "feed")
    snapshot = (state / "memory" / "memory" / "snapshot.json").read_bytes()
    monkeypatch.delenv("DMT_ADMIN_KEY", raising=False)
    out = tmp_path / "drift"
    assert bench_main(["iat-drift", "--run", str(run), "--out", str(out), *PROBE]) == 0
    assert sc(out, "baseline_T", "implicit") == 1.0
    assert sc(out, "dmt_T", "implicit") == 0.0 and sc(out, "baseline_t0", "explicit") == 0.0
    # the run's store is untouched, and the proxy's policy and log are kept
    assert (state / "memory" / "memory" / "snapshot.json").read_bytes() == snapshot
    assert sorted(p.name for p in (run / "memory" / "proxy").iterdir()) == ["state"]
    policy = yaml.safe_load((out / "proxy" / "policy.yaml").read_text())
    assert policy["default_model"] == "sim-agent" and policy["memory"]["backend"] == "memory"
    report = json.loads((out / "live_report.json").read_text())
    assert report["spec"]["proxy"] == "managed"
    assert report["targets"][1]["memories"] == {"total": 1, "tagged": 0, "pending": 0}
    shutil.rmtree(out)
