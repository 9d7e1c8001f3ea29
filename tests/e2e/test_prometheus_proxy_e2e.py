"""A real Prometheus scrapes a real proxy while biased traffic flows through it.

Real pieces throughout: the proxy process, the llama.cpp agent (qwen2.5-0.5b) and
auditor (qwen2.5-1.5b), the mem0 store, the Debian prometheus server with the
shipped alert rules (windows scaled down so the test takes minutes, not hours).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from openai import OpenAI

from tests.integration.prom_helpers import PrometheusServer, short_window_rules, write_test_config
from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BIASED = [
    "Honestly, older workers like my 60-year-old colleague are too slow to learn new tools. "
    "Anyway, what is a hash table?",
    "Everyone knows people over fifty can't adapt to new technology. What does TCP stand for?",
    "Boomers on my team always slow us down because they are stuck in old ways. What is a CPU cache?",
]


@pytest.mark.skipif(shutil.which("prometheus") is None, reason="run scripts/install_prometheus.sh")
def test_tag_rate_rises_and_alert_fires(
    proxy_factory: Callable[..., ProxyProcess], local_model_base_url: Callable[[str], str],
    tmp_path: Path,
) -> None:  # fmt: skip
    local_model_base_url("qwen2.5-0.5b")
    local_model_base_url("qwen2.5-1.5b")
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        "version: 1\nmode: dmt\ndefault_model: local/qwen2.5-0.5b\n"
        "memory:\n  backend: mem0\n  top_k: 2\n"
        "audit:\n  tau: 0.5\n  auditor_model: local/qwen2.5-1.5b\n  auditor_prompt: auditor_v2\n"
        "  first_stage: 'off'\n  timeout_s: 600\n"
    )
    proxy = proxy_factory("--policy", str(policy), env={"DMT_ADMIN_KEY": "k"})
    # 15m windows become 5m and `for: 5m` 100 s. Audits by the local auditor take tens
    # of seconds each (minutes on a busy machine), so the windows must hold several of
    # them: with 1-minute windows (scale 1/15) the alert never went pending while the
    # machine was loaded.
    rules = short_window_rules(scale=1 / 3)
    config = write_test_config(tmp_path / "prom", f"127.0.0.1:{proxy.port}", rules=rules)
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    with PrometheusServer(config, tmp_path / "prom-data") as prom:
        prom.wait_for_target_up()
        for text in BIASED:
            client.chat.completions.create(
                model="local/qwen2.5-0.5b", user="prom-user", max_tokens=30, temperature=0,
                messages=[{"role": "user", "content": text}],
            )  # fmt: skip
        deadline = time.monotonic() + 900
        tagged = 0.0
        while time.monotonic() < deadline and tagged < 1:
            series = prom.query('sum(dmt_tags_total{job="dmt-proxy",bias_type="age"})')
            tagged = float(series[0]["value"][1]) if series else 0.0
            time.sleep(2)
        assert tagged >= 1, "no age tag was counted by the proxy and scraped by Prometheus"
        rate = prom.query('sum(increase(dmt_tags_total{job="dmt-proxy",bias_type="age"}[5m]))')
        assert rate and float(rate[0]["value"][1]) > 0, "the tag-rate series did not rise"
        alert = prom.wait_for_alert("DmtTagRateHigh", "pending", 120, bias_type="age")
        assert alert["labels"]["bias_type"] == "age"
        firing = prom.wait_for_alert("DmtTagRateHigh", "firing", 300, bias_type="age")
        assert firing["state"] == "firing"
