"""Write and search latency of the memory backends at 1k and 10k stored memories.

For each backend and size N: a fresh store is filled with N memories of ONE user
(the worst case for every backend: mem0 and langmem partition by user, the pager
keeps one archive per user), then ``--writes`` new interactions are written and
``--searches`` questions are asked through the public ``MemoryBackend`` API, each
timed on its own (real embedding of the new text or query included).

The fill is not timed and takes a shortcut, because embedding 10k texts costs
6 min on this shared 2-core machine: the fill texts are realistic short
interactions built from ``len(TOPICS)`` real embedded texts; each fill record
gets its topic's real embedding plus small noise (sigma 0.02, renormalized), so
the vectors are clustered like real ones. Fill records are generated in chunks
of ``FILL_CHUNK`` so that 100k of them never sit in RAM at once. mem0 is filled
through its vector-store layer with the payload its ``add(infer=False)`` writes;
langmem through the langgraph store's batch API; letta by inserting all but the
newest ``core_size`` rows straight into its archive table (the newest through
``write()``); memory through ``write()``. During the fill only, SQLite's per-commit
fsync is off (``PRAGMA synchronous=OFF``) in Qdrant's point file (mem0) and in the
langgraph store file (langmem), and restored afterwards: both commit once per
point there, which the timed writes do pay.

Wall times on a shared machine mostly measure the scheduler, so each row also
gives the process CPU time per operation (all threads: embedding, store, mem0).
The embedder runs with one BLAS (or torch) thread: on this 2-core machine shared
with other jobs, two torch threads made mem0's 10k search p50 70.8 ms instead of
21.8 ms in back-to-back runs. Each row also records the
process RSS (``/proc/self/status``): before the backend opens, the peak up to
the end of the fill, and the peak of the timed phase alone (the high-water mark
is reset after the fill through ``/proc/self/clear_refs``).

Run:  python benchmarks/perf/memory_latency.py --sizes 1000 10000
Writes benchmarks/results/perf/memory_latency/memory_latency.md. ``memory_scaling.py`` reuses this
module for the 1k -> 10k -> 100k scaling curves (one process per row).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import json
import math
import os
import platform
import resource
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import numpy as np

from dmt_bench.stats import percentile
from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.memory.base import MemoryBackend, MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend

RESULTS = Path(__file__).resolve().parents[1] / "results"
USER = Scope(user="bench-user")
FILL_CHUNK = 500

TOPICS = [
    ("My manager keeps moving the deadline for the {x} report.", "Ask for a written timeline."),
    ("I adopted a {x} puppy last week and it chews everything.", "Try chew toys and short walks."),
    ("Can you help me plan a budget for a trip to {x}?", "Sure: transport, lodging, food, extras."),
    ("My landlord wants to raise the rent by {x} percent.", "Check your lease and local rules."),
    ("I am learning {x} and keep forgetting the grammar.", "Spaced repetition helps a lot."),
    ("Our team hired a new {x} engineer who seems very slow.", "Give them time to onboard."),
    ("I need a recipe for {x} that takes under 30 minutes.", "A one-pan version works well."),
    ("My doctor said my {x} levels are a bit high.", "Follow up on diet and exercise."),
    ("Which laptop is better for {x} work on a budget?", "Prioritise RAM and a good screen."),
    (
        "My neighbour from {x} plays loud music every night.",
        "Talk to them first, then the building.",
    ),
    ("I want to switch careers into {x} at 45.", "Many people do; start with a course."),
    ("How do I explain {x} to my grandmother?", "Use a simple everyday analogy."),
]
FILLERS = ["Norway", "Spanish", "beagle", "marketing", "Kenya", "cholesterol", "pasta", "data",
           "Brazil", "nursing", "Python", "Lisbon", "10", "design", "Japan", "iron"]  # fmt: skip
QUERIES = [
    "What did my manager do with the deadline?", "Do I have a dog?", "Where am I travelling?",
    "What is going on with my rent?", "Which language am I learning?", "Who did our team hire?",
    "What should I cook tonight?", "What did my doctor tell me?", "Which laptop should I buy?",
    "What is the problem with my neighbour?", "What career change am I considering?",
    "How can I explain technology to my family?",
]  # fmt: skip


class FillEmbedder:
    """The real embedder, except for texts whose vectors were precomputed for the fill."""

    def __init__(self, inner: LocalEmbedder) -> None:
        self.inner = inner
        self.known: dict[str, list[float]] = {}
        self.fill_mode = False

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Known fill vectors, pseudo vectors for other fill-time texts, else real ones."""
        if all(t in self.known for t in texts):
            return [self.known[t] for t in texts]
        if self.fill_mode:  # e.g. the pager's summaries during the fill: not timed
            return [pseudo_vector(t) for t in texts]
        return self.inner.embed(texts)


def pseudo_vector(text: str) -> list[float]:
    """A deterministic random unit vector for ``text`` (untimed fill-time texts only)."""
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:8], 16)
    v = np.random.default_rng(seed).normal(size=384)
    return list(map(float, v / np.linalg.norm(v)))


@dataclass(frozen=True)
class FillItem:
    """One fill record and the vector it is stored with."""

    record: MemoryRecord
    vector: list[float]


def fill_chunks(
    n: int, topic_vectors: np.ndarray, seed: int, chunk: int = FILL_CHUNK
) -> Iterator[list[FillItem]]:
    """The ``n`` fill records in chunks: item i is topic i mod 12, vector = topic + noise."""
    rng = np.random.default_rng(seed)
    for start in range(0, n, chunk):
        idx = np.arange(start, min(n, start + chunk))
        topics = idx % len(TOPICS)
        v = topic_vectors[topics] + rng.normal(scale=0.02, size=(len(idx), topic_vectors.shape[1]))
        vectors = (v / np.linalg.norm(v, axis=1, keepdims=True)).tolist()
        items = []
        for i, t, vector in zip(idx.tolist(), topics.tolist(), vectors, strict=True):
            q, a = TOPICS[t]
            query = q.format(x=FILLERS[(i // len(TOPICS)) % len(FILLERS)]) + f" (note {i})"
            record = MemoryRecord.from_interaction(USER, query, a, metadata={"fill": True})
            items.append(FillItem(record, vector))
        yield items


class _NoSync:
    """``PRAGMA synchronous=OFF`` on a SQLite connection until ``restore()``."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.before = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        conn.execute("PRAGMA synchronous=OFF")

    def restore(self) -> None:
        self.conn.execute(f"PRAGMA synchronous={self.before}")


async def _fill_mem0(backend: Any, chunks: Iterator[list[FillItem]]) -> None:
    from dmt_proxy.memory.backends.mem0_backend import Mem0Backend

    parts = backend._parts
    # Create the user's partition first so the fsync switch below covers every point:
    # Qdrant's local mode commits (fsyncs) its SQLite file once per point (~18 ms
    # here, which mem0's timed writes do pay).
    part = parts._partition(USER.user_key, create=True)
    local = part.client._client.collections[part.collection_name].storage
    nosync = _NoSync(local.storage) if local is not None else None
    for items in chunks:
        payloads = []
        for item in items:
            r = item.record
            p = Mem0Backend._payload(r)
            p.update(data=r.text, hash=hashlib.md5(r.text.encode()).hexdigest(),
                     updated_at=p["created_at"], text_lemmatized=r.text,
                     user_id=USER.user_key, role="user")  # fmt: skip
            payloads.append(p)
        parts.insert([i.vector for i in items], payloads, [str(uuid.uuid4()) for _ in items])
    if nosync is not None:
        nosync.restore()


async def _fill_langmem(
    backend: Any, chunks: Iterator[list[FillItem]], embedder: FillEmbedder
) -> None:
    from langgraph.store.base import PutOp

    from dmt_proxy.memory.backends.langmem_backend import INTERACTION, _value

    ns = backend._ns(USER)
    # The store writes each item's vector row in its own autocommit transaction.
    nosync = _NoSync(backend._store._conn)
    for items in chunks:
        embedder.known = {i.record.text: i.vector for i in items}
        ops = [PutOp(ns, i.record.id, _value(i.record, INTERACTION), index=["text"]) for i in items]
        await backend._store.abatch(ops)
    nosync.restore()


async def _fill_letta(
    backend: Any, n: int, chunks: Iterator[list[FillItem]], embedder: FillEmbedder
) -> None:
    from dmt_proxy.memory.backends.letta_backend import _core_key
    from dmt_proxy.memory.backends.letta_schema import vector_blob

    # All but the newest core_size go straight to the archive (as if paged out and
    # summarized); the newest go through write() so the core is in its real state.
    archived = max(0, n - backend._options.core_size)
    newest: list[FillItem] = []
    seq = 0
    for items in chunks:
        rows = []
        for item in items:
            if seq >= archived:
                newest.append(item)
                continue
            seq += 1
            r = item.record
            rows.append((r.id, USER.user_key, _core_key(USER), USER.user, seq,
                         r.audit_status.value, r.model_dump_json(), vector_blob(item.vector)))  # fmt: skip
        if not rows:
            continue
        backend._conn.execute("BEGIN")
        backend._conn.executemany(
            "INSERT INTO records (id, user_key, core_key, user, agent, session, tier, kind, seq,"
            " audit_status, body, embedding) VALUES (?, ?, ?, ?, NULL, NULL, 'archival',"
            " 'interaction', ?, ?, ?, ?)",
            rows,
        )
        backend._conn.execute("COMMIT")
    backend._seq = seq
    embedder.known = {i.record.text: i.vector for i in newest}
    for item in newest:
        await backend.write(USER, item.record)


async def fill(
    name: str, backend: Any, n: int, chunks: Iterator[list[FillItem]], embedder: FillEmbedder
) -> None:
    """Put the ``n`` fill records into ``backend`` (see the module docstring for how)."""
    if name == "mem0":
        await _fill_mem0(backend, chunks)
    elif name == "langmem":
        await _fill_langmem(backend, chunks, embedder)
    elif name == "letta":
        await _fill_letta(backend, n, chunks, embedder)
    else:
        for items in chunks:
            embedder.known = {i.record.text: i.vector for i in items}
            for item in items:
                await backend.write(USER, item.record)
    embedder.known = {}


def _status_mb(field: str) -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return math.nan


def rss_mb() -> float:
    """Current resident set size of this process in MiB (NaN without /proc)."""
    return _status_mb("VmRSS")


def peak_rss_mb() -> float:
    """Peak RSS since start or the last ``reset_peak_rss()``, MiB (ru_maxrss without /proc)."""
    peak = _status_mb("VmHWM")
    if math.isnan(peak):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return peak


def reset_peak_rss() -> bool:
    """Reset the peak-RSS mark to the current RSS (Linux ``clear_refs`` 5); False if refused."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as refs:
            refs.write("5")
        return True
    except OSError:
        return False


async def measure(
    name: str,
    size: int,
    args: argparse.Namespace,
    embedder: FillEmbedder,
    topic_vectors: np.ndarray,
) -> dict[str, Any]:
    """One row: fill a fresh ``name`` store with ``size`` memories, then time writes and searches."""
    state = Path(tempfile.mkdtemp(prefix=f"memlat-{name}-"))
    options = {"scoring": "keyword"} if name == "memory" else {}
    rss_base = rss_mb()
    backend: MemoryBackend = await create_backend(
        name,
        BackendConfig(state_dir=state, embedder=embedder, options=options),
    )
    embedder.fill_mode = True
    t0 = time.perf_counter()
    await fill(name, backend, size, fill_chunks(size, topic_vectors, seed=size), embedder)
    fill_s = time.perf_counter() - t0
    embedder.fill_mode = False
    rss_fill_peak = peak_rss_mb()
    print(f"  {name} @ {size}: filled in {fill_s:.1f} s", file=sys.stderr)
    gc.collect()
    serve_peak_only = reset_peak_rss()
    writes, searches, write_cpu, search_cpu, found, embeds = [], [], [], [], [], []
    for i in range(args.writes):
        q, a = TOPICS[i % len(TOPICS)]
        record = MemoryRecord.from_interaction(USER, q.format(x=f"item {i} of the week"), a)
        t, c = time.perf_counter(), time.process_time()
        await backend.write(USER, record)
        writes.append(1000 * (time.perf_counter() - t))
        write_cpu.append(1000 * (time.process_time() - c))
    for i in range(args.searches):
        t = time.perf_counter()  # a bare embedding in the same time window, for reference
        await asyncio.to_thread(embedder.inner.embed, [QUERIES[i % len(QUERIES)] + f" ({i})"])
        embeds.append(1000 * (time.perf_counter() - t))
        t, c = time.perf_counter(), time.process_time()
        hits = await backend.search(USER, QUERIES[i % len(QUERIES)], k=5)
        searches.append(1000 * (time.perf_counter() - t))
        search_cpu.append(1000 * (time.process_time() - c))
        found.append(len(hits))
    rss_peak, rss_end = peak_rss_mb(), rss_mb()
    await backend.close()
    row = {
        "backend": name, "stored": size, "fill_s": round(fill_s, 1),
        "write_p50_ms": percentile(writes, 50), "write_p95_ms": percentile(writes, 95),
        "search_p50_ms": percentile(searches, 50), "search_p95_ms": percentile(searches, 95),
        "write_cpu_p50_ms": percentile(write_cpu, 50), "search_cpu_p50_ms": percentile(search_cpu, 50),
        "search_cpu_p95_ms": percentile(search_cpu, 95),
        "search_first_ms": searches[0] if searches else math.nan,
        "mean_hits": sum(found) / len(found) if found else 0.0,
        "embed_p50_ms": percentile(embeds, 50),
        "rss_base_mb": round(rss_base, 1), "rss_fill_peak_mb": round(rss_fill_peak, 1),
        "rss_peak_mb": round(rss_peak, 1), "rss_end_mb": round(rss_end, 1),
        "rss_peak_is_timed_phase": serve_peak_only,
    }  # fmt: skip
    print(f"  {name} @ {size}: {json.dumps(row)}", file=sys.stderr)
    return row


def markdown(rows: list[dict[str, Any]], env: dict[str, Any], command: str) -> str:
    lines = [
        "# Memory backend latency",
        "",
        f"Measured {env['date']} on {env['machine']} (1-min load average {env['load']} at"
        f" start, {env['load_end']} at the end: the machine is shared with other jobs, so wall"
        " times are noisy; CPU = process CPU time per operation, all threads). One user holds"
        " all N memories",
        "(worst case); fill not timed (see the script's docstring). Times in ms, through the",
        f"public `MemoryBackend` API, k=5; {env['writes']} writes and {env['searches']} searches per row.",
        "'query embedding' is a bare all-MiniLM-L6-v2 embedding timed just before each search",
        f"(every search and write includes one); embedder runtime: {env['embedder_runtime']}.",
        "",
        "| backend | stored | write p50 | write p95 | write CPU p50 | search p50 | search p95"
        " | search CPU p50 | query embedding p50 | mean hits | fill (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['backend']} | {r['stored']:,} | {r['write_p50_ms']:.1f} | {r['write_p95_ms']:.1f}"
            f" | {r['write_cpu_p50_ms']:.1f} | {r['search_p50_ms']:.1f} | {r['search_p95_ms']:.1f}"
            f" | {r['search_cpu_p50_ms']:.1f} | {r['embed_p50_ms']:.1f} | {r['mean_hits']:.1f}"
            f" | {r['fill_s']} |"
        )
    lines += [
        "",
        "Target (issue 3): mem0 search p95 <= 60 ms at 10k.",
        "",
        f"Versions: {', '.join(f'{k} {v}' for k, v in env['versions'].items())}.",
        "",
        f"Rerun: `{command}`",
        "",
    ]
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--backends", nargs="+", default=["mem0", "langmem", "letta", "memory"])
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--searches", type=int, default=60)
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "perf" / "memory_latency" / "memory_latency.md"
    )
    parser.add_argument(
        "--embedder-runtime", default="numpy", choices=("numpy", "sentence-transformers"),
        help="the shared embedder's runtime (both use one thread)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    inner = LocalEmbedder(runtime=args.embedder_runtime)
    embedder = FillEmbedder(inner)
    print(f"embedding {len(TOPICS)} topic texts ...", file=sys.stderr)
    topic_vectors = np.asarray(inner.embed([q.format(x=FILLERS[0]) + "\n" + a for q, a in TOPICS]))
    env = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "load": f"{os.getloadavg()[0]:.1f}",
        "writes": args.writes, "searches": args.searches, "embedder_runtime": args.embedder_runtime,
        "versions": {p: version(p) for p in ("mem0ai", "qdrant-client", "langgraph", "langgraph-checkpoint-sqlite")},
    }  # fmt: skip
    rows = []
    for size in args.sizes:
        for name in args.backends:
            rows.append(await measure(name, size, args, embedder, topic_vectors))
    env["load_end"] = f"{os.getloadavg()[0]:.1f}"
    command = "python benchmarks/perf/memory_latency.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(markdown(rows, env, command.strip()), encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
