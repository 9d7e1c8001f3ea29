"""The alert rules on a real Prometheus server, scraping the real metrics registry.

The scraped target here is dmt_proxy.metrics.Metrics served by prometheus_client's
own HTTP exporter, with counters driven by the test (not by the proxy): it checks
the rules, their short-window test variant and the server helper end to end. The
full path (biased traffic through the proxy and the real auditor) reuses
prom_helpers with the proxy's address as the target.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client import start_http_server

from dmt_proxy.metrics import Metrics
from dmt_proxy.net import free_port
from tests.integration.prom_helpers import (
    ALERTS_FILE,
    PrometheusServer,
    parse_duration,
    scale_expr,
    short_window_rules,
    write_test_config,
)

needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not installed: run scripts/install_prometheus.sh",
)


def test_scale_expr_shortens_ranges_offsets_and_subqueries() -> None:
    expr = "rate(x[15m]) > 3 * rate(x[1d] offset 15m) and max_over_time(y[1h:5m]) > 0"
    assert scale_expr(expr, 1 / 30, 4) == (
        "rate(x[30s]) > 3 * rate(x[2880s] offset 30s) and max_over_time(y[120s:10s]) > 0"
    )
    assert scale_expr("rate(x[1m])", 1 / 60, 4) == "rate(x[4s])"  # floor: two scrapes at 1s


def test_parse_duration_rejects_garbage() -> None:
    assert parse_duration("1h30m") == 5400
    with pytest.raises(ValueError):
        parse_duration("15 minutes")


def test_short_window_rules_keep_every_alert_and_scale_it() -> None:
    real = yaml.safe_load(ALERTS_FILE.read_text())
    short = short_window_rules()
    real_rules = [r for g in real["groups"] for r in g["rules"]]
    short_rules = [r for g in short["groups"] for r in g["rules"]]
    assert [r["alert"] for r in short_rules] == [r["alert"] for r in real_rules]
    for before, after in zip(real_rules, short_rules, strict=True):
        if "for" in before:
            assert parse_duration(after["for"]) < parse_duration(before["for"])
        assert "15m" not in after["expr"] and "1d" not in after["expr"]
    tag_high = next(r for r in short_rules if r["alert"] == "DmtTagRateHigh")
    assert ">= 1" in tag_high["expr"] and ">= 20" not in tag_high["expr"]


def test_short_window_rules_fail_loudly_when_a_replacement_no_longer_matches() -> None:
    with pytest.raises(ValueError, match="DmtTagRateHigh"):
        short_window_rules(expr_replacements={"DmtTagRateHigh": {">= 999": ">= 1"}})


@needs_prometheus
def test_short_window_rules_pass_promtool(tmp_path: Path) -> None:
    config = write_test_config(tmp_path, "127.0.0.1:9")
    for cmd in (["promtool", "check", "rules", str(config.rules_file)],
                ["promtool", "check", "config", str(config.config_file)]):  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.fixture
def exporter() -> Iterator[tuple[Metrics, int]]:
    metrics = Metrics()
    port = free_port()
    server, thread = start_http_server(port, addr="127.0.0.1", registry=metrics.registry)
    try:
        yield metrics, port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@needs_prometheus
@pytest.mark.slow
def test_real_prometheus_fires_tag_rate_alert(
    exporter: tuple[Metrics, int], tmp_path: Path
) -> None:
    metrics, port = exporter
    # Children exist at 0 before the first scrape, so the first increments count
    # (a series that appears already at 1 has no increase Prometheus can see).
    for outcome in ("clean", "tagged", "failed", "skipped"):
        metrics.audits.labels(outcome)
    metrics.tags.labels("race", "tag")
    metrics.tags.labels("age", "tag")

    config = write_test_config(tmp_path / "prom", f"127.0.0.1:{port}")
    with PrometheusServer(config, tmp_path / "data") as prom:
        prom.wait_for_target_up()
        stop = threading.Event()

        def traffic() -> None:
            # 2 audits/s, half tagged race: race share 50% (threshold 20%), age 0%.
            while not stop.is_set():
                metrics.audits.labels("tagged").inc()
                metrics.tags.labels("race", "tag").inc()
                metrics.audits.labels("clean").inc()
                time.sleep(0.5)

        worker = threading.Thread(target=traffic, daemon=True)
        worker.start()
        try:
            pending = prom.wait_for_alert("DmtTagRateHigh", "pending", 30, bias_type="race")
            firing = prom.wait_for_alert("DmtTagRateHigh", "firing", 40, bias_type="race")
        finally:
            stop.set()
            worker.join(timeout=5)
        assert pending["labels"]["severity"] == "warning"
        assert float(firing["value"]) == pytest.approx(0.5, abs=0.1)
        rate = {
            r["metric"]["bias_type"]: float(r["value"][1])
            for r in prom.query('sum by (bias_type) (rate(dmt_tags_total{job="dmt-proxy"}[10s]))')
        }
        assert rate["race"] > 1.0 and rate["age"] == 0.0
        names = {a["labels"]["alertname"] for a in prom.alerts()}
        assert "DmtProxyDown" not in names and "DmtProxyAbsent" not in names
        assert not [a for a in prom.alerts() if a["labels"].get("bias_type") == "age"]
