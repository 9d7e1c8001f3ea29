"""Experiment configs: validation messages, presets, digest, CLI errors (no model needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmt_bench.cli import main
from dmt_bench.sim.config import load_config, parse_config, with_overrides
from dmt_bench.sim.proxy import build_policy
from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import parse_policy

CONFIGS = Path(__file__).resolve().parents[2] / "benchmarks" / "configs"


@pytest.mark.parametrize(
    "name", ["quick", "paper_table2", "paper_table2_hosted", "heatmap_small", "compare_local_T20"]
)
def test_shipped_configs_validate(name: str) -> None:
    config = load_config(CONFIGS / f"{name}.yaml")
    assert config.checkpoints()[0] == 0 and config.checkpoints()[-1] == config.turns


def test_paper_protocol() -> None:
    config = load_config(CONFIGS / "paper_table2.yaml")
    assert (config.turns, config.interval, config.injection.rate, config.dib.sample) == (
        100, 20, 0.3, None,
    )  # fmt: skip
    assert config.checkpoints() == [0, 20, 40, 60, 80, 100] and config.t80() == 80
    assert config.conditions == ["baseline", "ssp", "dmt", "ssp+dmt"]


def test_checkpoints_always_end_at_t_and_t80_is_nearest() -> None:
    config = parse_config({"turns": 7, "interval": 3})
    assert config.checkpoints() == [0, 3, 6, 7] and config.t80() == 6
    assert parse_config({"turns": 10, "interval": 5}).t80() == 10


def test_errors_name_every_problem() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"turns": 0, "injection": {"rate": 1.5}, "memory": ["mem9"], "bogus": 1})
    text = str(info.value)
    for needle in ("turns", "injection.rate", "unknown memory architecture", "bogus"):
        assert needle in text
    with pytest.raises(ConfigError, match="single-source injection needs domain"):
        parse_config({"injection": {"mode": "single"}})
    with pytest.raises(ConfigError, match="interval"):
        parse_config({"turns": 5, "interval": 10})
    with pytest.raises(ConfigError, match="unknown DIB domain"):
        parse_config({"dib": {"domains": ["caste"]}})


def test_memory_aliases_and_local_model_names() -> None:
    config = parse_config({"memory": ["Mem0", "paging"], "models": {"agent": "qwen2.5-0.5b"}})
    assert config.memory == ["mem0", "letta"]
    assert config.models.agent.model == "local/qwen2.5-0.5b" and config.models.agent.is_local
    hosted = parse_config({"models": {"agent": {"model": "openai/gpt-4o-mini",
                                                 "api_key_env": "OPENAI_API_KEY"}}})  # fmt: skip
    assert not hosted.models.agent.is_local


def test_digest_ignores_execution_settings() -> None:
    a = parse_config({"turns": 10, "interval": 5})
    b = with_overrides(a, {"execution.proxy_url": "http://x/v1", "execution.dib_concurrency": 4})
    c = with_overrides(a, {"injection.rate": 0.5})
    assert a.digest() == b.digest() != c.digest()


def test_policy_for_the_proxy_is_valid() -> None:
    config = parse_config({"models": {"agent": {"model": "openai/gpt-4o-mini",
                                                "api_key_env": "OPENAI_API_KEY"}},
                           "agent": {"top_k": 4}, "audit": {"tau": 0.6}})  # fmt: skip
    policy = parse_policy(build_policy(config, "langmem"))
    assert policy.default_model == "sim-agent"
    assert policy.models["sim-agent"].model == "openai/gpt-4o-mini"
    assert policy.memory.backend == "langmem" and policy.memory.top_k == 4
    assert policy.audit.auditor_model == "local/qwen2.5-1.5b" and policy.audit.tau == 0.6


def test_cli_config_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", "--quick", "--lambda", "2", "--no-progress"]) == 2
    assert "injection.rate" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nturns: [1\n")
    assert main(["run", "--config", str(bad)]) == 2
    assert "not valid YAML" in capsys.readouterr().err
    assert main(["run", "--out", str(tmp_path / "none"), "--resume"]) == 2
    assert "nothing to resume" in capsys.readouterr().err
    assert main(["heatmap", "--small", "--memory", "mem0,letta", "--no-progress",
                 "--out", str(tmp_path / "h")]) == 2  # fmt: skip
    assert "one memory architecture" in capsys.readouterr().err


def test_dry_run_counts_calls(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", str(CONFIGS / "paper_table2.yaml"), "--dry-run",
                 "--no-probe", "--json"]) == 0  # fmt: skip
    import json

    est = json.loads(capsys.readouterr().out)
    roles = {r["role"]: r for r in est["roles"]}
    # 4 conditions × 3 memories × 100 turns; DMT and SSP+DMT are audited
    assert roles["agent"]["calls"] == 1200 and roles["audit"]["calls"] == 600
    # (12 threads × 5 later checkpoints + 2 shared t=0 audits) × 3,776 decisions
    assert roles["dib"]["calls"] == (12 * 5 + 2) * 3776
    assert est["dib_decisions_per_audit"] == 3776 and est["total_hours"] > 0


RESULTS = CONFIGS.parent / "results" / "sim"


def test_version_2_samples_whole_contexts_and_uses_the_proxys_auditor_prompt() -> None:
    from dmt_proxy.policy import load_policy

    config = parse_config({})
    assert config.version == 2 and config.dib.sampling == "dib-sample-v2"
    assert config.audit.prompt == load_policy().audit.auditor_prompt == "auditor_v3"
    policy = parse_policy(build_policy(config, "mem0"))
    assert policy.audit.auditor_prompt == "auditor_v3"
    told = parse_config({"audit": {"prompt": "auditor_v1"}})
    assert parse_policy(build_policy(told, "mem0")).audit.auditor_prompt == "auditor_v1"


def test_runs_audit_with_the_proxys_default_pipeline_unless_told() -> None:
    # The default local auditor is the two judges' pipeline, not the LLM alone.
    from dmt_proxy.policy import load_policy

    config = parse_config({})
    assert config.audit.first_stage == load_policy().audit.first_stage == "judge_v2"
    assert parse_policy(build_policy(config, "mem0")).audit.first_stage == "judge_v2"
    alone = parse_config({"audit": {"first_stage": "off"}})
    assert parse_policy(build_policy(alone, "mem0")).audit.first_stage == "off"
    assert alone.digest() != config.digest()
    # A version-1 config meant the LLM alone, and its digest leaves the field out.
    old = parse_config({"version": 1})
    assert old.audit.first_stage == "off"
    assert parse_policy(build_policy(old, "mem0")).audit.first_stage == "off"


def test_version_1_configs_keep_their_meaning_and_their_digest() -> None:
    old = parse_config({"version": 1, "dib": {"sample": 60}})
    assert old.dib.sampling == "dib-sample-v1" and old.audit.prompt == "auditor_v1"
    t20 = load_config(CONFIGS / "compare_local_T20.yaml")
    assert t20.version == 1 and t20.dib.sampling == "dib-sample-v1"
    # runs started before the new fields still resume: their manifests' digests hold
    for run in ("compare_local_T20", "compare_local_T100", "quick_mem0_seed0"):
        manifest = json.loads((RESULTS / run / "run.json").read_text(encoding="utf-8"))
        assert parse_config(manifest["config"]).digest() == manifest["digest"], run
    # ... while any new setting changes the digest
    moved = with_overrides(t20, {"dib.sampling": "dib-sample-v2"})
    assert moved.digest() != t20.digest()


def test_dib_sample_sizes() -> None:
    from dmt_bench.sim.runner import dib_samples

    config = parse_config({"dib": {"contexts_per_domain": 2, "domains": ["age", "race"]}})
    assert len(dib_samples(config)) == 2 * 3 + 2 * 4
    same = parse_config({"dib": {"sample": 1, "domains": ["age", "race"]}})
    assert dib_samples(same) == dib_samples(config)  # a tiny budget still gets two contexts
    with pytest.raises(ConfigError, match="not both"):
        parse_config({"dib": {"sample": 10, "contexts_per_domain": 2}})
    with pytest.raises(ConfigError, match="contexts_per_domain needs"):
        parse_config({"dib": {"contexts_per_domain": 2, "sampling": "dib-sample-v1"}})
    with pytest.raises(ConfigError, match="contexts_per_domain"):
        parse_config({"dib": {"contexts_per_domain": 1}})


def test_backend_options_reach_the_proxy_policy() -> None:
    config = parse_config({"memory": ["mem0", "langmem"], "agent": {"top_k": 7},
                           "backend_options": {"mem0": {"infer": True},
                                               "langmem": {"consolidate": True}}})  # fmt: skip
    mem0 = parse_policy(build_policy(config, "mem0"))
    assert mem0.memory.options == {"infer": True} and mem0.memory.top_k == 7
    assert parse_policy(build_policy(config, "langmem")).memory.options == {"consolidate": True}
    plain = build_policy(parse_config({}), "mem0")
    assert "options" not in plain["memory"]  # as the policy was before options existed
    aliased = parse_config({"memory": ["paging"], "backend_options": {"paging": {"core_size": 3}}})
    assert aliased.options_for("letta") == {"core_size": 3}
    with pytest.raises(ConfigError, match="does not use"):
        parse_config({"memory": ["mem0"], "backend_options": {"langmem": {"consolidate": True}}})


def test_bad_backend_options_fail_before_the_proxy_starts(tmp_path: Path) -> None:
    from dmt_bench.harness.proxy import ManagedProxy
    from dmt_bench.sim.proxy import check_backend_options, sim_proxy_spec

    config = parse_config({"memory": ["memory"], "backend_options": {"memory": {"bogus": 1}}})
    with pytest.raises(ConfigError, match=r"backend_options\.memory are invalid: bogus"):
        check_backend_options(config, "memory")
    with pytest.raises(ConfigError, match="bogus"):
        ManagedProxy(sim_proxy_spec(config, "memory"), "memory", tmp_path).start()
    assert not (tmp_path / "policy.yaml").exists()
    check_backend_options(parse_config({"memory": ["memory"],
                                        "backend_options": {"memory": {"persist": False}}}),
                          "memory")  # fmt: skip


def test_compare_flags_for_ablations_sizes_and_options() -> None:
    from dmt_bench.cli import build_parser
    from dmt_bench.sim.cli import compare_config

    args = build_parser().parse_args(
        ["compare", "--quick", "--ssp", "--dmt", "--dmt-tags", "--dmt-instruction",
         "--dib-contexts", "3", "--backend-option", "mem0.infer=true",
         "--auditor-prompt", "auditor_v1"]
    )  # fmt: skip
    config = compare_config(args)
    assert config.conditions == ["baseline", "ssp", "dmt", "dmt-tags", "dmt-instruction"]
    assert config.dib.contexts_per_domain == 3 and config.dib.sample is None
    assert config.backend_options == {"mem0": {"infer": True}}
    assert config.audit.prompt == "auditor_v1"
    quick = compare_config(build_parser().parse_args(["compare", "--quick"]))
    assert quick.dib.contexts_per_domain == 2 and quick.dib.sampling == "dib-sample-v2"
    sized = compare_config(build_parser().parse_args(["compare", "--quick", "--dib-sample", "90"]))
    assert sized.dib.sample == 90 and sized.dib.contexts_per_domain is None
    with pytest.raises(ConfigError, match=r"BACKEND\.KEY=VALUE"):
        compare_config(build_parser().parse_args(["compare", "--backend-option", "infer"]))
