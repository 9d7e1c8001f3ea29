"""Fault benchmark: chat latency, throughput and write safety while PostgreSQL is down.

The scale-out of ``docs/scaling.md`` on one machine: a throwaway PostgreSQL server
with pgvector (``dmt_proxy.testing.pg.PgCluster``, durable: fsync and synchronous
commit on), two ``dmt-proxy serve --no-worker`` and two ``dmt-proxy worker``
processes on it, the instant fake upstream (``dmt_proxy.testing.upstream_server``)
as the chat model and a second one answering a clean verdict as the auditor.

A paced load (``--threads`` concurrent clients sharing ``--rate`` requests/s,
alternating between the proxies; every fourth request streamed; each one writes a
unique marker) runs through these phases::

    baseline  (--baseline-s)   database up
    outage    (--outage-s)     pg_ctl stop -m fast, then start
    recovery  (--recovery-s)
    outage    (--outage-s)     pg_ctl stop -m immediate (a crash), then start
    recovery  (--recovery-s)

Per phase: requests started and answered, p50/p95 latency, and for an outage the p95
of the requests started after the first one that answered without memory had
returned (the circuit is open from then on: the target is p95 <= 2x the baseline
p95), and requests served per second against the baseline rate (target >= 80 %).
After the load the outbox (and every spool) is drained and the memory table read
back: each acknowledged write (``x-dmt-memory-write: queued``, or the stream's
``: x-dmt-memory-write: queued`` comment) must be stored exactly once under the
user that sent it. Repeated audits = auditor calls - memories audited (no worker is
killed here, so the target is 0). The proxies' and workers' logs are scanned for
tracebacks, ERROR lines and outage warnings without a cause.

Run:  python benchmarks/perf/pg_outage.py [--rate 30] [--threads 5] [--outage-s 15]
Writes benchmarks/results/perf/pg_outage/pg_outage.{json,md} (``--out-prefix``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import write_result

from dmt_bench.stats import percentile
from dmt_proxy.net import free_port

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
ADMIN_KEY = "pg-outage-bench-admin"
USERS = 8
VERDICT = json.dumps({"rationale": "No statement generalizes about a social group.",
                      "bias_detected": False, "bias_type": None, "target_group": "",
                      "tendency": "", "score": 0.05})  # fmt: skip
STREAM_REPORT = b": x-dmt-memory-write: queued\n\n"
MARKER = re.compile(r"outage-bench-(\d{6})")


def policy_yaml(up_port: int, auditor_port: int) -> str:
    return (
        "version: 1\nname: bench-pg-outage\nmode: dmt\ndefault_model: fast\nmodels:\n"
        f"  fast:\n    model: openai/fast\n    api_base: http://127.0.0.1:{up_port}/v1\n"
        f"  auditor:\n    model: openai/auditor\n    api_base: http://127.0.0.1:{auditor_port}/v1\n"
        "memory:\n  backend: postgres\n  top_k: 5\n"
        "audit:\n  auditor_model: auditor\n  first_stage: 'off'\n  timeout_s: 30\n"
        "  verdict: json\n"  # one auditor call per audit (no log-prob attempt to fall back from)
    )


@dataclass
class Sent:
    """One request of the load."""

    i: int
    user: str
    stream: bool
    started: float
    ended: float = 0.0
    status: int = 0
    acknowledged: bool = False
    memory: str = ""
    error: str = ""


@dataclass
class Phase:
    name: str
    start: float
    end: float = 0.0
    first_failure_end: float | None = None
    """When the first request answered without memory returned (outage phases)."""


@dataclass
class Load:
    base_urls: list[str]
    rate: float
    threads: int
    sent: list[Sent] = field(default_factory=list)
    stopping: bool = False

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=60) as client:
            await asyncio.gather(*(self._thread(client, k) for k in range(self.threads)))

    async def _thread(self, client: httpx.AsyncClient, k: int) -> None:
        period = self.threads / self.rate
        next_at = time.monotonic() + k * period / self.threads
        while not self.stopping:
            delay = next_at - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            next_at = max(next_at + period, time.monotonic())  # no catch-up burst after a stall
            i = len(self.sent)
            out = Sent(i=i, user=f"outage-{i % USERS}", stream=i % 4 == 3, started=time.monotonic())
            self.sent.append(out)
            await self._send(client, out)

    async def _send(self, client: httpx.AsyncClient, out: Sent) -> None:
        text = f"Remember note outage-bench-{out.i:06d}: the code word is w{out.i}x."
        body = {"model": "fast", "user": out.user, "stream": out.stream,
                "messages": [{"role": "user", "content": text}]}  # fmt: skip
        url = self.base_urls[out.i % len(self.base_urls)] + "/chat/completions"
        try:
            resp = await client.post(url, json=body)
            out.status = resp.status_code
            out.memory = resp.headers.get("x-dmt-memory", "")
            if out.stream:
                out.acknowledged = resp.status_code == 200 and resp.content.endswith(
                    STREAM_REPORT + b"data: [DONE]\n\n"
                )
            else:
                out.acknowledged = (
                    resp.status_code == 200 and resp.headers.get("x-dmt-memory-write") == "queued"
                )
        except httpx.HTTPError as exc:
            out.error = repr(exc)[:200]
        out.ended = time.monotonic()


def phase_stats(phase: Phase, sent: list[Sent], baseline: dict[str, Any] | None) -> dict[str, Any]:
    length = phase.end - phase.start
    inside = [s for s in sent if phase.start <= s.started < phase.end]
    ok = [s for s in inside if s.status == 200]
    lat = [(s.ended - s.started) * 1000 for s in ok]
    row: dict[str, Any] = {
        "phase": phase.name, "seconds": round(length, 2), "started": len(inside),
        "answered": len(ok), "errors": len(inside) - len(ok),
        "served_per_s": len(ok) / length if length else 0.0,
        "p50_ms": percentile(lat, 50) if lat else None,
        "p95_ms": percentile(lat, 95) if lat else None,
        "max_ms": max(lat) if lat else None,
        "without_memory": sum(s.memory.startswith("unavailable") for s in ok),
        "streams": sum(s.stream for s in ok),
        "streams_reporting_write": sum(s.stream and s.acknowledged for s in ok),
    }  # fmt: skip
    if phase.first_failure_end is not None:
        after = [(s.ended - s.started) * 1000 for s in ok if s.started >= phase.first_failure_end]
        row["first_failure_after_s"] = round(phase.first_failure_end - phase.start, 3)
        row["after_first_failure"] = {
            "answered": len(after),
            "p50_ms": percentile(after, 50) if after else None,
            "p95_ms": percentile(after, 95) if after else None,
        }
    if baseline is not None and baseline["p95_ms"]:
        after_p95 = row.get("after_first_failure", {}).get("p95_ms")
        row["p95_vs_baseline"] = after_p95 / baseline["p95_ms"] if after_p95 else None
        row["rate_vs_baseline"] = row["served_per_s"] / baseline["served_per_s"]
    return row


def scan_logs(paths: list[Path]) -> dict[str, int]:
    """Lines that must not appear during an outage, counted over every log."""
    text = "\n".join(p.read_text(errors="replace") for p in paths if p.exists())
    return {
        "tracebacks": text.count("Traceback"),
        "error_lines": sum(" ERROR " in line or "ERROR:" in line for line in text.splitlines()),
        "empty_causes": text.count("unreachable ()"),
        "failed_unexpectedly": text.count("failed unexpectedly"),
        "warnings": sum("WARNING" in line for line in text.splitlines()),
    }


async def wait_drained(base_urls: list[str], timeout_s: float = 300) -> float:
    t0 = time.monotonic()
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    async with httpx.AsyncClient(timeout=30) as client:
        while time.monotonic() - t0 < timeout_s:
            depths = []
            for base in base_urls:
                r = await client.get(base + "/admin/outbox", headers=headers)
                depths.append(r.json()["depth"] if r.status_code == 200 else -1)
            if all(d == 0 for d in depths):
                return time.monotonic() - t0
            await asyncio.sleep(0.25)
    raise TimeoutError("outbox not drained")


def stored_rows(dsn: str) -> list[tuple[str, str, str]]:
    import psycopg

    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT id, user_id, text FROM dmt_memories").fetchall()
    return [(str(a), str(b), str(c)) for a, b, c in rows]


def check_writes(sent: list[Sent], rows: list[tuple[str, str, str]]) -> dict[str, Any]:
    by_marker: dict[int, list[str]] = {}
    for _id, user, text in rows:
        for m in set(MARKER.findall(text)):
            by_marker.setdefault(int(m), []).append(user)
    acked = [s for s in sent if s.acknowledged]
    lost = [s.i for s in acked if s.i not in by_marker]
    duplicated = [i for i, users in by_marker.items() if len(users) > 1]
    wrong_user = [s.i for s in acked if s.i in by_marker and by_marker[s.i] != [s.user]]
    return {"acknowledged": len(acked), "stored": len(by_marker), "lost": len(lost),
            "duplicated": len(duplicated), "wrong_user": len(wrong_user),
            "examples": {"lost": lost[:5], "duplicated": duplicated[:5],
                         "wrong_user": wrong_user[:5]}}  # fmt: skip


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dmt_proxy.testing.pg import PgCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries with pgvector: run scripts/install_postgres.sh")
    tmp = Path(tempfile.mkdtemp(prefix="dmt-pg-outage-"))
    load_start = os.getloadavg()[0]
    procs: list[subprocess.Popen[bytes]] = []
    cluster = PgCluster(bindir=bindir, durable=True).init().start()
    logs: list[Path] = []
    try:
        cluster.execute("CREATE EXTENSION vector")
        dsn = cluster.dsn()
        ports = [free_port(), free_port()]
        for port, extra in zip(ports, ([], ["--answer", VERDICT]), strict=True):
            procs.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port",
                                str(port), *extra], f"http://127.0.0.1:{port}/health",
                               tmp / f"fake-{port}.log"))  # fmt: skip
        auditor_health = f"http://127.0.0.1:{ports[1]}/health"
        policy = tmp / "policy.yaml"
        policy.write_text(policy_yaml(*ports))
        env = {"DMT_LOG_LEVEL": "info", "DMT_ADMIN_KEY": ADMIN_KEY, "DMT_DATABASE_URL": dsn,
               "DMT_WORKER": "off", "DMT_OUTBOX": "postgres"}  # fmt: skip
        base_urls = []
        for k in range(2):
            port = free_port()
            logs.append(tmp / f"proxy-{k}.log")
            procs.append(start([python(), "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port",
                                str(port), "--policy", str(policy)],
                               f"http://127.0.0.1:{port}/healthz", logs[-1],
                               env={**env, "DMT_STATE_DIR": str(tmp / f"proxy-{k}")},
                               timeout_s=240))  # fmt: skip
            base_urls.append(f"http://127.0.0.1:{port}/v1")
        for k in range(2):
            logs.append(tmp / f"worker-{k}.log")
            with logs[-1].open("wb") as fh:
                procs.append(subprocess.Popen(
                    [python(), "-m", "dmt_proxy.cli.proxy_cli", "worker", "--policy", str(policy)],
                    env={**os.environ, **env, "DMT_STATE_DIR": str(tmp / f"worker-{k}")},
                    stdout=fh, stderr=subprocess.STDOUT))  # fmt: skip
        deadline = time.monotonic() + 240
        while not all("draining the outbox" in p.read_text(errors="replace") for p in logs[2:]):
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers did not start: {logs[2].read_text()[-2000:]}")
            await asyncio.sleep(0.2)
        async with httpx.AsyncClient(timeout=60) as client:  # warm-up, not counted
            for base in base_urls:
                await client.post(base + "/chat/completions", json={
                    "model": "fast", "messages": [{"role": "user", "content": "warm up"}]})  # fmt: skip
        audits_before = int(httpx.get(auditor_health, timeout=5).json()["requests"])

        load = Load(base_urls, args.rate, args.threads)
        task = asyncio.create_task(load.run())
        phases: list[Phase] = []

        async def window(name: str, seconds: float) -> Phase:
            phase = Phase(name, time.monotonic())
            phases.append(phase)
            await asyncio.sleep(seconds)
            phase.end = time.monotonic()
            return phase

        async def outage(mode: str) -> None:
            phase = Phase(f"outage ({mode} stop)", time.monotonic())
            phases.append(phase)
            await asyncio.to_thread(cluster.stop, mode)  # the phase includes the shutdown
            down = time.monotonic()
            while time.monotonic() - down < args.outage_s:
                if phase.first_failure_end is None:
                    failed = [s.ended for s in load.sent if s.started >= phase.start and s.ended
                              and s.memory.startswith("unavailable")]  # fmt: skip
                    phase.first_failure_end = min(failed) if failed else None
                await asyncio.sleep(0.05)
            phase.end = time.monotonic()
            await asyncio.to_thread(cluster.start)

        await window("baseline", args.baseline_s)
        for mode in args.stop_modes:
            await outage(mode)
            await window(f"recovery after {mode}", args.recovery_s)
        load.stopping = True
        await task
        drained_s = await wait_drained(base_urls)
        rows = stored_rows(dsn)
        audits = int(httpx.get(auditor_health, timeout=5).json()["requests"]) - audits_before
        metrics = [
            httpx.get(b.removesuffix("/v1") + "/metrics", timeout=10).text for b in base_urls
        ]
        version = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                                 text=True).stdout.split()[-1]  # fmt: skip
    finally:
        for p in reversed(procs):
            stop(p)
        cluster.destroy()

    baseline = phase_stats(phases[0], load.sent, None)
    table = [baseline] + [phase_stats(p, load.sent, baseline) for p in phases[1:]]
    writes = check_writes(load.sent, rows)
    audited = writes["stored"]  # the warm-up requests name no user: nothing is written
    opened = sum(float(m) for text in metrics
                 for m in re.findall(r"^dmt_store_circuit_opened_total (\S+)$", text, re.M))  # fmt: skip
    return {
        "benchmark": "pg_outage", "version": 1,
        "command": shlex.join(["python", "benchmarks/perf/pg_outage.py", *sys.argv[1:]]),
        "load": {"rate": args.rate, "threads": args.threads, "proxies": 2, "workers": 2,
                 "streams": "every 4th request", "users": USERS},
        "phases": table, "writes": writes, "drained_s": drained_s,
        "audits": audits, "repeated_audits": audits - audited,
        "circuit_opened": opened, "logs": scan_logs(logs), "note": args.note,
        "env": {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "machine": platform.machine(), "cpus": os.cpu_count(), "postgres": version,
                "python": platform.python_version(), "load_start": load_start,
                "load_end": os.getloadavg()[0]},
    }  # fmt: skip


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f}"


def markdown(data: dict[str, Any]) -> str:
    env, load, w, logs = data["env"], data["load"], data["writes"], data["logs"]
    lines = [
        "# PostgreSQL outage under load (benchmark `pg_outage` v1)", "",
        f"Measured {env['when']} on {env['machine']}, {env['cpus']} CPUs; 1-min load average "
        f"{env['load_start']:.1f} at the start, {env['load_end']:.1f} at the end (shared "
        "machine: PostgreSQL, two proxies, two workers, the fakes and the load generator on "
        f"the same cores). PostgreSQL {env['postgres']} (durable: fsync and synchronous "
        "commit on).", "",
        f"Rerun: `{data['command']}`", "",
        f"Load: {load['threads']} clients sharing {load['rate']:g} requests/s, alternating "
        f"between {load['proxies']} `serve --no-worker` proxies; {load['workers']} "
        f"`dmt-proxy worker` processes; {load['streams']} streamed; {load['users']} users; "
        "the instant fake upstream and a fake auditor answering clean.", "",
        "| phase | s | started | answered | served/s | served / offered | p50 ms | p95 ms | max ms "
        "| without memory | p95 after 1st failure ms | p95 / baseline | served rate / baseline "
        "| streams reporting their write |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]  # fmt: skip
    for r in data["phases"]:
        after = r.get("after_first_failure", {})
        ratio = r.get("p95_vs_baseline")
        rate = r.get("rate_vs_baseline")
        lines.append(
            f"| {r['phase']} | {r['seconds']:.1f} | {r['started']} | {r['answered']} "
            f"| {r['served_per_s']:.1f} | {r['served_per_s'] / load['rate']:.0%} "
            f"| {_ms(r['p50_ms'])} | {_ms(r['p95_ms'])} "
            f"| {_ms(r['max_ms'])} | {r['without_memory']} | {_ms(after.get('p95_ms'))} "
            f"| {'—' if ratio is None else f'{ratio:.2f}'} "
            f"| {'—' if rate is None else f'{rate:.0%}'} "
            f"| {r['streams_reporting_write']} / {r['streams']} |"
        )
    lines += [
        "", "Targets (issue 28): during an outage, p95 of the requests started after the first "
        "one answered without memory <= 2x the baseline p95; requests served >= 80 % of the "
        "baseline rate; 0 lost, 0 duplicated, 0 stored under the wrong user; no repeated "
        "audit without a killed worker. Where the machine cannot serve the offered rate with "
        "the database up (baseline below 100 % of offered), the outage's rate is compared with "
        "both: the baseline's and the offered one.", "",
        "| acknowledged | stored | lost | duplicated | wrong user | auditor calls "
        "| repeated audits | circuit opened | outbox drained after |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {w['acknowledged']} | {w['stored']} | {w['lost']} | {w['duplicated']} "
        f"| {w['wrong_user']} | {data['audits']} | {data['repeated_audits']} "
        f"| {data['circuit_opened']:.0f} | {data['drained_s']:.1f} s |", "",
        f"Logs of the proxies and workers: {logs['tracebacks']} tracebacks, "
        f"{logs['error_lines']} ERROR lines, {logs['failed_unexpectedly']} 'failed "
        f"unexpectedly', {logs['empty_causes']} warnings without a cause, "
        f"{logs['warnings']} warnings in all.",
    ]  # fmt: skip
    if data.get("note"):
        lines += ["", data["note"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=30.0, help="requests/s, all clients")
    parser.add_argument("--threads", type=int, default=5, help="concurrent clients")
    parser.add_argument("--baseline-s", type=float, default=20.0)
    parser.add_argument("--outage-s", type=float, default=15.0)
    parser.add_argument("--recovery-s", type=float, default=15.0)
    parser.add_argument("--stop-modes", nargs="+", default=["fast", "immediate"],
                        choices=["fast", "immediate"])  # fmt: skip
    parser.add_argument("--note", default="", help="a line added to the markdown")
    parser.add_argument("--out-prefix", default=str(RESULTS / "perf" / "pg_outage" / "pg_outage"))
    args = parser.parse_args(argv)
    data = asyncio.run(run(args))
    out = Path(args.out_prefix)
    write_result(out, data, markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
