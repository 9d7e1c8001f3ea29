"""The alert rules pass promtool (check + unit tests); configs pass promtool/amtool.

promtool and amtool come from the Debian packages installed by
scripts/install_prometheus.sh (CI runs it); without them these tests skip.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
PROM = REPO / "deploy" / "prometheus"
ALERTMANAGER = REPO / "deploy" / "alertmanager" / "alertmanager.yml"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool not installed: run scripts/install_prometheus.sh (Debian package prometheus)",
)
needs_amtool = pytest.mark.skipif(
    shutil.which("amtool") is None,
    reason="amtool not installed: run scripts/install_prometheus.sh "
    "(Debian package prometheus-alertmanager)",
)


def run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO)


def alert_rules() -> list[dict[str, Any]]:
    doc = yaml.safe_load((PROM / "alerts.yml").read_text())
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


@needs_promtool
def test_promtool_check_rules() -> None:
    proc = run("promtool", "check", "rules", str(PROM / "alerts.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_promtool
def test_promtool_unit_tests_pass() -> None:
    proc = run("promtool", "test", "rules", str(PROM / "alerts_test.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@needs_promtool
def test_promtool_unit_tests_catch_a_broken_threshold(tmp_path: Path) -> None:
    # The unit tests must be able to fail: raise one threshold and expect red.
    rules = (PROM / "alerts.yml").read_text()
    assert ") > 0.2\n" in rules
    (tmp_path / "alerts.yml").write_text(rules.replace(") > 0.2\n", ") > 0.6\n"))
    shutil.copy(PROM / "alerts_test.yml", tmp_path / "alerts_test.yml")
    proc = run("promtool", "test", "rules", str(tmp_path / "alerts_test.yml"))
    assert proc.returncode != 0
    assert "DmtTagRateHigh" in proc.stdout + proc.stderr


@needs_promtool
def test_promtool_check_config() -> None:
    proc = run("promtool", "check", "config", str(PROM / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_amtool
def test_amtool_check_config() -> None:
    proc = run("amtool", "check-config", str(ALERTMANAGER))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@needs_amtool
@pytest.mark.parametrize(
    ("severity", "receiver"), [("critical", "dmt-proxy-oncall"), ("warning", "dmt-proxy-team")]
)
def test_alertmanager_routes_by_severity(severity: str, receiver: str) -> None:
    proc = run("amtool", "config", "routes", "test", f"--config.file={ALERTMANAGER}",
               "alertname=DmtTagRateHigh", f"severity={severity}")  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == receiver


def test_every_alert_has_severity_annotations_and_runbook() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {
        "DmtTagRateHigh", "DmtTagRateSpike", "DmtAuditFailureRatioHigh",
        "DmtOutboxBacklog", "DmtOutboxStale", "DmtUpstreamErrorRatioHigh", "DmtProxyDown",
    }  # fmt: skip
    for rule in rules:
        assert rule["labels"]["severity"] in {"warning", "critical"}, rule["alert"]
        assert {"summary", "description", "runbook"} <= set(rule["annotations"]), rule["alert"]
        assert "for" in rule, f"{rule['alert']} would fire on a single evaluation"


def test_every_alert_is_unit_tested_firing_and_not_firing() -> None:
    tests = yaml.safe_load((PROM / "alerts_test.yml").read_text())["tests"]
    firing: set[str] = set()
    quiet: set[str] = set()
    for case in tests:
        for check in case.get("alert_rule_test", []):
            (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alert_rules()}
    assert names - firing == set(), "alerts never shown firing"
    assert names - quiet == set(), "alerts never shown not firing"


def test_scrape_job_matches_the_rules() -> None:
    config = yaml.safe_load((PROM / "prometheus.yml").read_text())
    jobs = {j["job_name"] for j in config["scrape_configs"]}
    assert "dmt-proxy" in jobs
    down = next(r for r in alert_rules() if r["alert"] == "DmtProxyDown")
    assert 'job="dmt-proxy"' in down["expr"]
