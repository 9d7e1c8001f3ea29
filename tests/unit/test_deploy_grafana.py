"""The Grafana dashboard: valid JSON, a datasource variable, the panels operators need.

Metric and label names in its queries are checked in test_deploy_metric_names.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "deploy" / "grafana" / "dmt-proxy.json"


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def test_datasource_is_a_variable_used_everywhere(dash: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in dash["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_layout_is_consistent(dash: dict[str, Any]) -> None:
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids)), "duplicate panel ids"
    for panel in dash["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
    assert dash["uid"] == "dmt-proxy" and isinstance(dash["schemaVersion"], int)


@pytest.mark.parametrize(
    ("topic", "metric"),
    [
        ("tag rate by bias domain", "dmt_tags_total"),
        ("audit latency", "dmt_audit_duration_seconds_bucket"),
        ("proxy overhead", "dmt_proxy_overhead_seconds_bucket"),
        ("outbox depth", "dmt_outbox_depth"),
        ("oldest pending write", "dmt_outbox_oldest_pending_age_seconds"),
        ("upstream errors", "dmt_upstream_errors_total"),
        ("request rate", "dmt_requests_total"),
    ],
)
def test_required_panel_exists(dash: dict[str, Any], topic: str, metric: str) -> None:
    panels = [p for p in dash["panels"] if p["title"].lower() == topic]
    assert panels, f"no panel titled {topic!r}"
    assert any(metric in t["expr"] for t in panels[0]["targets"])
