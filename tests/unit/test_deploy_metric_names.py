"""Every metric and label the alert rules and the Grafana dashboard use is exported.

Exported names come from a fresh ``Metrics()`` registry in which each labelled
collector got one child, parsed back from its text exposition; PromQL is parsed
with promql-parser, so a typo in a rule or a panel fails here, not on a dark
dashboard in production.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import promql_parser
import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from dmt_proxy.metrics import Metrics

REPO = Path(__file__).resolve().parents[2]
ALERTS = REPO / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = REPO / "deploy" / "grafana" / "dmt-proxy.json"
METRICS_DOC = REPO / "docs" / "metrics.md"

# Series Prometheus itself adds to every scrape target.
SCRAPE_SERIES = {"up": {"job", "instance"}}
TARGET_LABELS = {"job", "instance"}


def exported_series() -> dict[str, set[str]]:
    """Sample name -> label names, from a Metrics() registry with one child per collector."""
    metrics = Metrics()
    for collector in vars(metrics).values():
        if isinstance(collector, MetricWrapperBase):
            # prometheus_client has no public accessor for a collector's label names.
            names = collector._labelnames
            if names:
                collector.labels(*["x"] * len(names))
    text = generate_latest(metrics.registry).decode()
    series: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            series.setdefault(sample.name, set()).update(sample.labels)
    for name, labels in SCRAPE_SERIES.items():
        series[name] = set(labels)
    for labels in series.values():
        labels.update(TARGET_LABELS)
    return series


@dataclass(frozen=True)
class Query:
    """One PromQL expression and where it came from."""

    where: str
    expr: str
    legend: str = ""


def alert_queries() -> Iterator[Query]:
    doc = yaml.safe_load(ALERTS.read_text())
    for group in doc["groups"]:
        for rule in group["rules"]:
            yield Query(f"alerts.yml {rule.get('alert') or rule.get('record')}", rule["expr"])


def dashboard_queries() -> Iterator[Query]:
    dash = json.loads(DASHBOARD.read_text())
    for panel in dash["panels"]:
        for target in panel.get("targets", []):
            yield Query(f"panel {panel['title']!r}", target["expr"], target.get("legendFormat", ""))
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            query = var["query"]["query"] if isinstance(var["query"], dict) else var["query"]
            match = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", query)
            assert match, f"variable {var['name']}: unsupported query {query!r}"
            yield Query(f"variable {var['name']}", f"{match[1]}{{{match[2]}!=''}}")


def grafana_to_promql(expr: str) -> str:
    """Substitute Grafana's variables so the expression parses as PromQL."""
    expr = re.sub(r"\$__(rate_interval|interval|range)", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", ".*", expr)


@dataclass(frozen=True)
class Selector:
    name: str
    labels: frozenset[str]


def walk(expr: str) -> tuple[list[Selector], set[str]]:
    """Vector selectors in ``expr`` and label names used by by/without/on/ignoring."""
    tree = promql_parser.parse(expr)
    selectors: list[Selector] = []
    grouping: set[str] = set()

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"selector without a metric name in {expr!r}"
            labels = frozenset(m.name for m in node.matchers.matchers if m.name != "__name__")
            selectors.append(Selector(node.name, labels))
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            grouping.update(node.modifier.labels)
        elif isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            matching = node.modifier.matching
            if matching is not None:
                grouping.update(matching.labels)
            grouping.update(node.modifier.group_labels or [])
        return True

    promql_parser.walk(tree, visit)
    return selectors, grouping


def all_queries() -> list[Query]:
    return [*alert_queries(), *dashboard_queries()]


@pytest.mark.parametrize("query", all_queries(), ids=lambda q: q.where)
def test_query_uses_only_exported_metrics_and_labels(query: Query) -> None:
    exported = exported_series()
    selectors, grouping = walk(grafana_to_promql(query.expr))
    assert selectors, f"{query.where}: no metric in {query.expr!r}"
    available: set[str] = set()
    for sel in selectors:
        assert sel.name in exported, f"{query.where}: {sel.name} is not exported by Metrics"
        unknown = sel.labels - exported[sel.name]
        assert not unknown, f"{query.where}: {sel.name} has no label(s) {sorted(unknown)}"
        available |= exported[sel.name]
    assert grouping <= available, f"{query.where}: grouping on {sorted(grouping - available)}"
    legend_labels = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", query.legend))
    assert legend_labels <= grouping | available, f"{query.where}: legend {query.legend!r}"


def test_walk_finds_selectors_and_grouping() -> None:
    selectors, grouping = walk(
        'sum by (bias_type) (rate(dmt_tags_total{action="tag"}[5m])) / on (job) up'
    )
    assert selectors == [
        Selector("dmt_tags_total", frozenset({"action"})),
        Selector("up", frozenset()),
    ]
    assert grouping == {"bias_type", "job"}


def test_exported_series_include_counter_and_histogram_suffixes() -> None:
    exported = exported_series()
    assert exported["dmt_tags_total"] >= {"bias_type", "action"}
    assert "le" in exported["dmt_audit_duration_seconds_bucket"]
    assert "dmt_audit_duration_seconds_count" in exported
    assert "dmt_tags" not in exported  # the bare counter name is never a series


def test_every_metric_and_alert_is_documented() -> None:
    doc = METRICS_DOC.read_text()
    for family in Metrics().registry.collect():
        # Counters are exposed (and queried) with the _total suffix.
        name = f"{family.name}_total" if family.type == "counter" else family.name
        assert f"`{name}`" in doc, f"{name} missing from docs/metrics.md"
    for rule in (r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]):
        assert f"`{rule['alert']}`" in doc, f"alert {rule['alert']} missing from docs/metrics.md"
