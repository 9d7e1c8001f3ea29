"""The PostgreSQL backend and outbox: memory-on added latency, proxy RSS, outbox throughput.

A throwaway PostgreSQL server with pgvector (``dmt_proxy.testing.pg.PgCluster``, the
binaries of ``scripts/install_postgres.sh``), real ``dmt-proxy serve`` and
``dmt-proxy worker`` processes, the instant fake upstream and a fake auditor.

1. **Added latency and RSS at N memories** (``--sizes``, default 10k and 100k). Per N,
   a fresh database is filled with N memories of the benchmark user (the clustered
   vectors of ``memory_latency.py``, written with ``COPY``; the HNSW index is built
   after the fill; neither is timed), then one proxy (postgres backend, its built-in
   worker) serves closed-loop requests at concurrency 1 in alternating blocks:
   memory off (``X-DMT-Memory: off``) and memory on without mitigation (mode ``off``:
   retrieval of top-5 and the write-back through the outbox, drained after each "on"
   block and charged to it). Added = on percentile - off percentile, as in
   ``memory_path.py`` (whose mem0 row this sits next to). RSS: the proxy's VmRSS at
   the end and its peak (VmHWM); the vectors live in the database, not the proxy.
2. **Outbox throughput with 1 and 2 workers.** ``--rows`` writes are enqueued through
   ``PostgresOutbox`` by 8 concurrent producers while k ``dmt-proxy worker``
   processes (already started and ready) drain them with a fake auditor that answers
   after ``--auditor-delay-s`` (2 s); enqueues/s over the producers' wall time,
   audits/s = rows / time until the outbox is empty (each worker audits 2 rows at
   a time, so about 1/s per worker is the ceiling at 2 s per audit).

Run:  python benchmarks/perf/pg_scaling.py [--sizes 10000 100000] [--requests 200] [--rows 60]
Writes benchmarks/results/perf/pg_scaling/pg_scaling.{json,md} (``--out-prefix``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _procs import python, start, stop
from _results import write_result

from dmt_bench.stats import percentile
from dmt_proxy.exchange import Exchange
from dmt_proxy.modes import Mode
from dmt_proxy.net import free_port

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
USER_ID = "bench-user"
ADMIN_KEY = "pg-scaling-bench-admin"
VERDICT = json.dumps({"rationale": "No statement generalizes about a social group.",
                      "bias_detected": False, "bias_type": None, "target_group": "",
                      "tendency": "", "score": 0.05})  # fmt: skip
HEADERS = {
    "off": {"x-dmt-user": USER_ID, "x-dmt-memory": "off", "x-dmt-mode": "off"},
    "on": {"x-dmt-user": USER_ID, "x-dmt-memory": "read-write", "x-dmt-mode": "off"},
}


def policy_yaml(up_port: int, auditor_port: int) -> str:
    return (
        "version: 1\nname: bench-pg\nmode: 'off'\ndefault_model: fast\nmodels:\n"
        f"  fast:\n    model: openai/fast\n    api_base: http://127.0.0.1:{up_port}/v1\n"
        f"  auditor:\n    model: openai/auditor\n    api_base: http://127.0.0.1:{auditor_port}/v1\n"
        "memory:\n  backend: postgres\n  top_k: 5\n"
        "audit:\n  auditor_model: auditor\n  first_stage: 'off'\n  timeout_s: 30\n"
    )


def status_mb(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM of ``pid`` in MiB."""
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) / 1024
    return out


async def fill(dsn: str, state_dir: Path, n: int) -> dict[str, float]:
    """Create the memory table (through the backend) and COPY ``n`` memories into it."""
    import numpy as np
    import psycopg
    from memory_latency import FILLERS, TOPICS, USER, fill_chunks

    from dmt_proxy.embedder import LocalEmbedder
    from dmt_proxy.memory.registry import BackendConfig, create_backend

    assert USER.user == USER_ID
    embedder = LocalEmbedder()
    backend = await create_backend("postgres", BackendConfig(state_dir=state_dir,
                                   embedder=embedder, options={"dsn": dsn}))  # fmt: skip
    await backend.close()
    topic_vectors = np.asarray(
        embedder.embed([q.format(x=FILLERS[0]) + "\n" + a for q, a in TOPICS])
    )
    t0 = time.perf_counter()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute("DROP INDEX dmt_memories_hnsw")
        async with (
            conn.cursor() as cur,
            cur.copy(
                "COPY dmt_memories (id, user_id, text, query, answer, created_at, updated_at,"
                " audit_status, metadata, record_version, embedding) FROM STDIN"
            ) as copy,
        ):
            for chunk in fill_chunks(n, topic_vectors, seed=n, chunk=2000):
                for item in chunk:
                    r = item.record
                    await copy.write_row((
                        r.id, r.scope.user, r.text, r.query, r.answer, r.created_at,
                        r.updated_at, r.audit_status.value, json.dumps(r.metadata),
                        r.schema_version,
                        "[" + ",".join(f"{x:.6f}" for x in item.vector) + "]",
                    ))  # fmt: skip
        copied = time.perf_counter() - t0
        await conn.execute("SET maintenance_work_mem = '512MB'")
        await conn.execute(
            "CREATE INDEX dmt_memories_hnsw ON dmt_memories USING hnsw"
            " (embedding vector_cosine_ops)"
        )
        await conn.execute("ANALYZE dmt_memories")
    return {"copy_s": copied, "index_s": time.perf_counter() - t0 - copied}


async def closed_loop(base: str, requests: int, block: int) -> dict[str, Any]:
    """Alternate off/on blocks at concurrency 1; the outbox is drained after each on block."""
    from memory_latency import QUERIES

    lat: dict[str, list[float]] = {"off": [], "on": []}
    errors = {"off": 0, "on": 0}
    injected: list[int] = []
    i = 0
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for arm in ("off", "on"):  # warm-up, not counted
            await client.post("/chat/completions", headers=HEADERS[arm], json={
                "model": "fast", "messages": [{"role": "user", "content": "warm up"}]})  # fmt: skip
        while min(len(v) for v in lat.values()) < requests:
            for arm in ("off", "on"):
                for _ in range(block):
                    i += 1
                    text = f"{QUERIES[i % len(QUERIES)]} (request {i})"
                    t0 = time.perf_counter()
                    r = await client.post("/chat/completions", headers=HEADERS[arm], json={
                        "model": "fast", "messages": [{"role": "user", "content": text}]})  # fmt: skip
                    ms = (time.perf_counter() - t0) * 1000
                    if r.status_code != 200:
                        errors[arm] += 1
                        continue
                    if arm == "on":
                        injected.append(int(r.headers.get("x-dmt-memories", "0")))
                    lat[arm].append(ms)
                if arm == "on":  # write-backs overlap the block's requests, not the next block
                    await wait_empty(client)
    out: dict[str, Any] = {"errors": errors,
                           "mean_injected": sum(injected) / max(1, len(injected))}  # fmt: skip
    for arm, values in lat.items():
        out[arm] = {f"p{q}": percentile(values, q) for q in (50, 95, 99)} | {"n": len(values)}
    out["added_p50_ms"] = out["on"]["p50"] - out["off"]["p50"]
    out["added_p95_ms"] = out["on"]["p95"] - out["off"]["p95"]
    return out


async def wait_empty(client: httpx.AsyncClient, timeout_s: float = 300) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        r = await client.get("/admin/outbox", headers={"authorization": f"Bearer {ADMIN_KEY}"})
        if r.json()["depth"] == 0:
            return time.monotonic() - t0
        await asyncio.sleep(0.05)
    raise TimeoutError("outbox not drained")


async def latency_row(cluster: Any, tmp: Path, n: int, args: argparse.Namespace,
                      policy: Path) -> dict[str, Any]:  # fmt: skip
    dsn = cluster.create_database()
    filled = await fill(dsn, tmp / f"fill-{n}", n)
    port = free_port()
    env = {"DMT_STATE_DIR": str(tmp / f"state-{n}"), "DMT_LOG_LEVEL": "warning",
           "DMT_ADMIN_KEY": ADMIN_KEY, "DMT_DATABASE_URL": dsn}  # fmt: skip
    proc = start([python(), "-m", "dmt_proxy.cli.proxy_cli", "serve", "--port", str(port),
                  "--policy", str(policy)], f"http://127.0.0.1:{port}/healthz",
                 tmp / f"proxy-{n}.log", env=env, timeout_s=240)  # fmt: skip
    try:
        idle = status_mb(proc.pid)
        result = await closed_loop(f"http://127.0.0.1:{port}/v1", args.requests, args.block)
        rss = status_mb(proc.pid)
    finally:
        stop(proc)
    return {"memories": n, **filled, **result, "rss_idle_mb": idle["VmRSS"],
            "rss_end_mb": rss["VmRSS"], "rss_peak_mb": rss["VmHWM"]}  # fmt: skip


async def throughput_row(cluster: Any, tmp: Path, workers: int, args: argparse.Namespace,
                         policy: Path) -> dict[str, Any]:  # fmt: skip
    from dmt_proxy.memory.base import Scope
    from dmt_proxy.memory.write.pg_outbox import PostgresOutbox

    dsn = cluster.create_database()
    env = {**os.environ, "DMT_LOG_LEVEL": "info", "DMT_DATABASE_URL": dsn}
    procs: list[subprocess.Popen[bytes]] = []
    logs = [tmp / f"worker-{workers}-{k}.log" for k in range(workers)]
    try:
        for k, log in enumerate(logs):
            with log.open("wb") as fh:
                procs.append(subprocess.Popen(
                    [python(), "-m", "dmt_proxy.cli.proxy_cli", "worker", "--policy", str(policy)],
                    env={**env, "DMT_STATE_DIR": str(tmp / f"wstate-{workers}-{k}")},
                    stdout=fh, stderr=subprocess.STDOUT))  # fmt: skip
        deadline = time.monotonic() + 300
        while not all("draining the outbox" in log.read_text(errors="replace") for log in logs):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise RuntimeError(f"workers did not start: {logs[0].read_text()[-2000:]}")
            await asyncio.sleep(0.2)
        outbox = await PostgresOutbox.open(dsn, pool_size=8)
        try:
            queue = list(range(args.rows))
            t0 = time.perf_counter()

            async def producer() -> None:
                while queue:
                    i = queue.pop()
                    await outbox.enqueue(Exchange(scope=Scope(user=f"u{i % 10}"), query=f"note {i}",
                                                  answer="ok", request_id=f"r{i}", mode=Mode.DMT))  # fmt: skip

            await asyncio.gather(*(producer() for _ in range(8)))
            enqueue_s = time.perf_counter() - t0
            while (await outbox.stats())[0] > 0:
                if time.perf_counter() - t0 > 600:
                    raise TimeoutError("outbox not drained in 600 s")
                await asyncio.sleep(0.1)
            drained_s = time.perf_counter() - t0
        finally:
            await outbox.aclose()
    finally:
        for p in procs:
            stop(p)
    return {"workers": workers, "rows": args.rows, "enqueue_s": enqueue_s,
            "enqueues_per_s": args.rows / enqueue_s, "drain_s": drained_s,
            "audits_per_s": args.rows / drained_s}  # fmt: skip


def markdown(data: dict[str, Any]) -> str:
    env = data["env"]
    lines = [
        "# PostgreSQL backend and outbox: added latency, RSS, outbox throughput "
        "(benchmark `pg_scaling` v1)", "",
        f"Measured {env['when']} on {env['machine']}, {env['cpus']} CPUs; 1-min load average "
        f"{env['load_start']:.1f} at the start, {env['load_end']:.1f} at the end (shared "
        "machine: PostgreSQL, proxy, workers, fakes and the load generator on the same cores). "
        f"PostgreSQL {env['postgres']}, pgvector HNSW (cosine), top-k 5, all-MiniLM-L6-v2 in "
        "the proxy.", "",
        f"Rerun: `{data['command']}`", "",
        "## 1. Memory-on added latency and proxy RSS (postgres backend)", "",
        "Closed loop, concurrency 1, alternating off/on blocks; on = retrieval + write-back "
        "(mode off; write-backs run during the block, the outbox is drained after it). ms; "
        "MB = 2^20 bytes.", "",
        "| memories | fill (COPY + HNSW) s | off p50 / p95 | on p50 / p95 | added p50 | added p95 "
        "| injected | errors off/on | RSS idle / end / peak MB |",
        "|---:|---|---|---|---:|---:|---:|---|---|",
    ]  # fmt: skip
    for r in data["latency"]:
        if "error" in r:
            lines.append(f"| {r['memories']:,} | failed: {r['error']} |||||||| ")
            continue
        lines.append(
            f"| {r['memories']:,} | {r['copy_s']:.1f} + {r['index_s']:.1f} "
            f"| {r['off']['p50']:.1f} / {r['off']['p95']:.1f} "
            f"| {r['on']['p50']:.1f} / {r['on']['p95']:.1f} | {r['added_p50_ms']:.1f} "
            f"| {r['added_p95_ms']:.1f} | {r['mean_injected']:.1f} "
            f"| {r['errors']['off']} / {r['errors']['on']} "
            f"| {r['rss_idle_mb']:.0f} / {r['rss_end_mb']:.0f} / {r['rss_peak_mb']:.0f} |"
        )
    lines += [
        "", "Targets (issue 16): proxy RSS <= 300 MB at 100k memories, added p95 <= 60 ms at "
        "100k. The mem0, langmem and letta rows are in [memory_path.md](../memory_path/memory_path.md) "
        "and [memory_scaling.md](../memory_scaling/memory_scaling.md).",
        "", "## 2. Outbox throughput (PostgreSQL outbox, `dmt-proxy worker` processes)", "",
        f"{data['rows']} writes enqueued by 8 concurrent producers while k workers drain them; "
        f"fake auditor answering after {data['auditor_delay_s']} s; each worker audits 2 rows "
        "at a time.", "",
        "| workers | enqueues/s | audits/s | drain s |", "|---:|---:|---:|---:|",
    ]  # fmt: skip
    for r in data["throughput"]:
        lines.append(f"| {r['workers']} | {r['enqueues_per_s']:.0f} | {r['audits_per_s']:.2f} "
                     f"| {r['drain_s']:.1f} |")  # fmt: skip
    if data.get("note"):
        lines += ["", data["note"]]
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from dmt_proxy.testing import upstream_server  # noqa: F401  (fails early if missing)
    from dmt_proxy.testing.pg import PgCluster, find_bindir

    bindir = find_bindir()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries with pgvector: run scripts/install_postgres.sh")
    tmp = Path(tempfile.mkdtemp(prefix="dmt-pg-bench-"))
    load_start = os.getloadavg()[0]
    fakes = []
    cluster = PgCluster(bindir=bindir).init().start()
    try:
        cluster.execute("CREATE DATABASE dmt_template")
        cluster.execute("CREATE EXTENSION vector", "dmt_template")
        ports = [free_port(), free_port()]
        for port, extra in zip(ports, ([], ["--answer", VERDICT, "--delay-s",
                                            str(args.auditor_delay_s)]), strict=True):  # fmt: skip
            fakes.append(start([python(), "-m", "dmt_proxy.testing.upstream_server", "--port",
                                str(port), *extra], f"http://127.0.0.1:{port}/health",
                               tmp / f"fake-{port}.log"))  # fmt: skip
        policy = tmp / "policy.yaml"
        policy.write_text(policy_yaml(*ports))
        latency = []
        for n in args.sizes:
            try:
                latency.append(await latency_row(cluster, tmp, n, args, policy))
            except Exception as exc:  # recorded, and the larger sizes are skipped
                latency.append({"memories": n, "error": repr(exc)[:300]})
                break
            print(json.dumps(latency[-1]), flush=True)
        throughput = []
        for k in args.workers:
            throughput.append(await throughput_row(cluster, tmp, k, args, policy))
            print(json.dumps(throughput[-1]), flush=True)
        version = subprocess.run([str(bindir / "postgres"), "--version"], capture_output=True,
                                 text=True).stdout.split()[-1]  # fmt: skip
    finally:
        for f in fakes:
            stop(f)
        cluster.destroy()
    return {
        "benchmark": "pg_scaling", "version": 1, "rows": args.rows,
        "auditor_delay_s": args.auditor_delay_s, "latency": latency, "throughput": throughput,
        "command": shlex.join(["python", "benchmarks/perf/pg_scaling.py", *sys.argv[1:]]),
        "note": args.note,
        "env": {"when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
                "machine": platform.machine(), "cpus": os.cpu_count(), "postgres": version,
                "python": platform.python_version(), "load_start": load_start,
                "load_end": os.getloadavg()[0]},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--requests", type=int, default=200, help="per arm and size")
    parser.add_argument("--block", type=int, default=20)
    parser.add_argument("--rows", type=int, default=60, help="writes for the throughput rows")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--auditor-delay-s", type=float, default=2.0)
    parser.add_argument("--note", default="", help="a line added to the markdown")
    parser.add_argument("--out-prefix", default=str(RESULTS / "perf" / "pg_scaling" / "pg_scaling"))
    args = parser.parse_args(argv)
    data = asyncio.run(run(args))
    out = Path(args.out_prefix)
    write_result(out, data, markdown(data))
    print(markdown(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
