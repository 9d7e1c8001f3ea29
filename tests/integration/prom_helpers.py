"""A real Prometheus server for tests: config, short-window rules, start/stop, HTTP API.

``write_test_config`` writes a ``prometheus.yml`` that scrapes one ``host:port``
every second as ``job="dmt-proxy"`` and loads a test variant of
``deploy/prometheus/alerts.yml`` whose windows and ``for`` durations are scaled
down (``short_window_rules``) and whose volume floors are lowered, so an alert can go
pending and firing within seconds. ``PrometheusServer`` runs the Debian
``prometheus`` binary on that config and answers queries through its HTTP API.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dmt_proxy.net import free_port

REPO = Path(__file__).resolve().parents[2]
ALERTS_FILE = REPO / "deploy" / "prometheus" / "alerts.yml"

DEFAULT_SCALE = 1 / 30
"""15m windows become 30s, `for: 5m` becomes 10s, the 1-day baseline 48m."""

# Volume floors sized for production traffic; a test sends a handful of requests.
DEFAULT_EXPR_REPLACEMENTS: Mapping[str, Mapping[str, str]] = {
    "DmtTagRateHigh": {">= 20": ">= 1"},
    "DmtTagRateSpike": {">= 5": ">= 1"},
    "DmtAuditFailureRatioHigh": {">= 10": ">= 1"},
    "DmtAuditorDown": {">= 10": ">= 1"},
    "DmtUpstreamErrorRatioHigh": {">= 10": ">= 1"},
    "DmtRequestErrorRatioHigh": {">= 10": ">= 1"},
}

_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = r"(?:\d+(?:ms|[smhdwy]))+"
_DURATION_PART = re.compile(r"(\d+)(ms|[smhdwy])")
# A range or subquery `[15m]`, `[1h:5m]`, and `offset 15m`.
_RANGE = re.compile(rf"\[({_DURATION})(?::({_DURATION})?)?\]")
_OFFSET = re.compile(rf"\boffset\s+({_DURATION})")


def parse_duration(text: str) -> float:
    """Seconds in a Prometheus duration such as ``1h30m`` (ValueError if malformed)."""
    if not re.fullmatch(_DURATION, text):
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNIT_S[u] for n, u in _DURATION_PART.findall(text))


def format_duration(seconds: float) -> str:
    """Whole seconds as a Prometheus duration (``30s``); at least ``1s``."""
    return f"{max(1, round(seconds))}s"


def scale_expr(expr: str, scale: float, min_range_s: float) -> str:
    """Scale every range, subquery step and offset in ``expr`` by ``scale``.

    Ranges are kept at ``min_range_s`` or more so a rate always sees two scrapes.
    """

    def rng(match: re.Match[str]) -> str:
        window = format_duration(max(min_range_s, parse_duration(match.group(1)) * scale))
        if match.group(2) is None:
            return f"[{window}:]" if match.group(0).endswith(":]") else f"[{window}]"
        step = format_duration(parse_duration(match.group(2)) * scale)
        return f"[{window}:{step}]"

    def off(match: re.Match[str]) -> str:
        return f"offset {format_duration(parse_duration(match.group(1)) * scale)}"

    return _OFFSET.sub(off, _RANGE.sub(rng, expr))


def short_window_rules(
    source: Path = ALERTS_FILE,
    *,
    scale: float = DEFAULT_SCALE,
    min_range_s: float = 4.0,
    expr_replacements: Mapping[str, Mapping[str, str]] = DEFAULT_EXPR_REPLACEMENTS,
) -> dict[str, Any]:
    """The rules of ``source`` with windows and ``for`` scaled for a fast test.

    Each replacement (alert name -> {old: new}) must match in every rule of that
    name, so a rule edit that invalidates the test variant fails loudly.
    """
    doc: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    for group in doc["groups"]:
        for rule in group["rules"]:
            expr = str(rule["expr"])
            for old, new in expr_replacements.get(rule.get("alert", ""), {}).items():
                if old not in expr:
                    raise ValueError(f"{rule['alert']}: {old!r} not found in its expr")
                expr = expr.replace(old, new)
            rule["expr"] = scale_expr(expr, scale, min_range_s)
            if "for" in rule:
                rule["for"] = format_duration(parse_duration(str(rule["for"])) * scale)
    return doc


@dataclass(frozen=True)
class PrometheusTestConfig:
    """Files written by ``write_test_config``."""

    config_file: Path
    rules_file: Path
    target: str
    job: str


def write_test_config(
    dest: Path,
    target: str,
    *,
    job: str = "dmt-proxy",
    scrape_interval_s: int = 1,
    rules: Mapping[str, Any] | None = None,
) -> PrometheusTestConfig:
    """Write prometheus.yml (scrape ``target`` every second) and the test rules into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    rules_file = dest / "alerts_test_windows.yml"
    rules_file.write_text(yaml.safe_dump(dict(rules or short_window_rules()), sort_keys=False))
    interval = f"{scrape_interval_s}s"
    config = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval,
                   "scrape_timeout": interval},
        "rule_files": [rules_file.name],
        "scrape_configs": [
            {"job_name": job, "metrics_path": "/metrics",
             "static_configs": [{"targets": [target]}]},
        ],
    }  # fmt: skip
    config_file = dest / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config, sort_keys=False))
    return PrometheusTestConfig(config_file, rules_file, target, job)


@dataclass
class PrometheusServer:
    """A ``prometheus`` process on 127.0.0.1 with its own TSDB directory."""

    config: PrometheusTestConfig
    data_dir: Path
    port: int = field(default_factory=free_port)
    binary: str = "prometheus"
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "prometheus.log"

    def start(self, timeout_s: float = 30.0) -> PrometheusServer:
        """Start the server and wait until ``/-/ready`` answers."""
        exe = shutil.which(self.binary)
        if exe is None:
            raise FileNotFoundError(
                "prometheus not found: run scripts/install_prometheus.sh (Debian package)"
            )
        self.data_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file.open("ab") as log:
            self._proc = subprocess.Popen(
                [exe, f"--config.file={self.config.config_file}",
                 f"--storage.tsdb.path={self.data_dir / 'tsdb'}",
                 f"--web.listen-address=127.0.0.1:{self.port}",
                 "--storage.tsdb.retention.time=1h", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as resp:
                    if resp.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        self.stop()
        raise TimeoutError(f"prometheus not ready after {timeout_s}s: {self.log_tail()}")

    def stop(self) -> None:
        """Terminate the server (kill after 10 s)."""
        if self._proc is None:
            return
        self._proc.terminate()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._proc = None

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the server's log, for failure messages."""
        try:
            return self.log_file.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/<path>`` and return its ``data`` (RuntimeError on API errors)."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as resp:
            body = json.loads(resp.read())
        if body.get("status") != "success":
            raise RuntimeError(f"prometheus API {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """Instant query: the result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
        data = self.api("query", query=expr)
        return list(data["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing), as ``/api/v1/alerts`` lists them."""
        return list(self.api("alerts")["alerts"])

    def wait_for_alert(
        self, name: str, state: str = "firing", timeout_s: float = 60.0, **labels: str
    ) -> dict[str, Any]:
        """Wait until alert ``name`` is in ``state`` (with ``labels``); TimeoutError if not."""
        deadline = time.monotonic() + timeout_s
        seen: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            seen = self.alerts()
            for alert in seen:
                al = alert["labels"]
                if (
                    al.get("alertname") == name
                    and alert["state"] == state
                    and all(al.get(k) == v for k, v in labels.items())
                ):
                    return alert
            time.sleep(0.5)
        raise TimeoutError(f"alert {name} {labels} not {state} after {timeout_s}s; active: {seen}")

    def wait_for_target_up(self, timeout_s: float = 30.0) -> None:
        """Wait until the scraped target reports ``up == 1``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            result = self.query(f'up{{job="{self.config.job}"}}')
            if result and result[0]["value"][1] == "1":
                return
            time.sleep(0.5)
        raise TimeoutError(f"target {self.config.target} not up after {timeout_s}s")
