"""Pure helpers of benchmarks/perf/memory_path.py (no processes are started here)."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "perf" / "memory_path.py"


@pytest.fixture(scope="module")
def mp() -> ModuleType:
    spec = importlib.util.spec_from_file_location("memory_path_under_test", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


def test_summarize_counts_errors_apart_and_nearest_rank(mp: ModuleType) -> None:
    samples = [mp.Sample(float(ms), True, 5, True) for ms in range(1, 101)]
    samples.append(mp.Sample(9999.0, False))
    stats = mp.summarize(samples)
    assert (stats.n, stats.errors, stats.acked_writes) == (101, 1, 100)
    assert (stats.p50_ms, stats.p95_ms, stats.p99_ms) == (50.0, 95.0, 99.0)
    assert stats.mean_memories == 5.0


def test_summarize_empty_is_nan(mp: ModuleType) -> None:
    stats = mp.summarize([])
    assert stats.n == 0 and stats.errors == 0
    assert math.isnan(stats.p50_ms) and math.isnan(stats.mean_memories)


def test_ratio(mp: ModuleType) -> None:
    assert mp.ratio(100.0, 104.0) == pytest.approx(1.04)
    assert math.isnan(mp.ratio(0.0, 1.0))
    assert math.isnan(mp.ratio(float("nan"), 1.0))


PROM = """# HELP dmt_audits_total Auditor verdicts
# TYPE dmt_audits_total counter
dmt_audits_total{outcome="clean"} 7.0
dmt_audits_total{outcome="tagged"} 2.0
dmt_audits_created{outcome="clean"} 1.7e9
dmt_memory_writes_total{backend="mem0",outcome="stored"} 12.0
dmt_memory_writes_total{backend="mem0",outcome="retried"} 1.0
dmt_outbox_depth 3.0
"""


def test_prom_sum_filters_by_name_and_labels(mp: ModuleType) -> None:
    assert mp.prom_sum(PROM, "dmt_audits_total") == 9.0
    assert mp.prom_sum(PROM, "dmt_audits_total", outcome="tagged") == 2.0
    assert mp.prom_sum(PROM, "dmt_memory_writes_total", outcome="stored") == 12.0
    assert mp.prom_sum(PROM, "dmt_outbox_depth") == 3.0
    assert mp.prom_sum(PROM, "missing") == 0.0
    later = PROM.replace('"clean"} 7.0', '"clean"} 10.0')
    assert mp.prom_delta(PROM, later, "dmt_audits_total") == 3


def test_proc_fields(mp: ModuleType) -> None:
    status = "Name:\tpython\nVmHWM:\t  250000 kB\nVmRSS:\t  204800 kB\nRssAnon:\t  100 kB\n"
    assert mp.status_kb(status, "VmRSS") == 204800
    assert mp.status_kb(status, "RssAnon") == 100
    assert mp.status_kb(status, "VmSwap") is None
    stat = "42 (py thon) S " + " ".join(["0"] * 10) + " 150 50 0 0"
    assert mp.cpu_seconds(stat, 100) == 2.0


def test_phase_rss_keeps_order_and_peaks(mp: ModuleType) -> None:
    samples = [
        mp.RssSample(0.5, "idle", 1024, 512),
        mp.RssSample(1.0, "load", 3072, 1024),
        mp.RssSample(1.5, "load", 2048, 2048),
        mp.RssSample(2.0, "idle", 1024, 512),  # a phase seen again extends its first row
    ]
    rows = mp.phase_rss(samples)
    assert [r.phase for r in rows] == ["idle", "load"]
    load = rows[1]
    assert (load.samples, load.peak_mb, load.last_mb, load.peak_anon_mb) == (2, 3.0, 2.0, 2.0)
    assert mp.phase_rss([]) == []


def test_fake_auditor_answer_is_a_valid_verdict(mp: ModuleType) -> None:
    from dmt_proxy.audit.parsing import parse_verdict

    assert parse_verdict(json.dumps(mp.VERDICT))["bias_detected"] is False


def test_policy_validates(mp: ModuleType) -> None:
    import yaml

    from dmt_proxy.policy import Mode, parse_policy

    for backend in ("mem0", "none"):
        policy = parse_policy(yaml.safe_load(mp.policy_yaml(9001, 9002, backend, 5)))
        assert policy.mode is Mode.OFF and policy.memory.backend == backend
        assert policy.audit.first_stage == "off"
        assert policy.models["auditor"].api_base == "http://127.0.0.1:9002/v1"


def test_no_nan_makes_strict_json(mp: ModuleType) -> None:
    data = {"a": float("nan"), "b": [1.0, float("nan")], "c": {"d": "x"}}
    assert mp.finite(data) == {"a": None, "b": [1.0, None], "c": {"d": "x"}}
    json.dumps(mp.finite(data), allow_nan=False)
