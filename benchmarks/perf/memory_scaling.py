"""Memory retrieval scaling: search latency per backend at 1k -> 10k -> 100k stored memories.

Each (backend, N) row runs in a fresh child process with ``memory_latency.measure``
(so its fill, its timed writes and searches, and what it says about what is and
is not timed hold here unchanged), which makes the peak RSS of a row that row's
own: nothing is left over from a previous backend or size.

Timed, per operation, through the public ``MemoryBackend`` API: ``--writes``
``write()`` calls and then ``--searches`` ``search(k=5)`` calls on a store that
holds N memories of one user (wall time and process CPU time, all threads; the
query's real embedding included). Not timed: the child's start-up (the
embedder), the fill (N records with pre-computed clustered embeddings, put in
through each backend's own storage layer in chunks of 500; ``fill_s`` gives its
wall time), ``close()``. ``search_first_ms`` is the first search alone (cold
per-user caches: letta builds its archive matrix on the first search); p50/p95
are over all searches, so one cold search moves neither.

RSS (MiB, /proc/self/status): ``rss_base`` after the embedder is loaded and before
the backend opens; ``rss_fill_peak`` the process peak up to the end of the fill
(the fill's own chunks included); ``rss_peak`` the peak of the timed phase alone
(high-water mark reset after the fill), i.e. the process with N memories
resident, serving. ``rss_peak - rss_base`` approximates the backend's memory at N
(its library imports included).

A row that fails or passes ``--row-timeout`` is recorded with the reason, and
that backend is not run at larger sizes.

Run:  python benchmarks/perf/memory_scaling.py --sizes 1000 10000 100000
Writes benchmarks/results/perf/memory_scaling/memory_scaling.{json,md,png} (``--out-prefix``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _results import write_result
from memory_latency import FILLERS, RESULTS, TOPICS, FillEmbedder, measure

RESULT_VERSION = 1
BACKENDS = ("mem0", "langmem", "letta", "memory")
COLORS = {"mem0": "tab:blue", "langmem": "tab:orange", "letta": "tab:green", "memory": "tab:red"}


def loglog_slope(sizes: Sequence[float], values: Sequence[float]) -> float:
    """Least-squares slope b of log(value) = a + b log(N): value grows like N^b.

    With x_i = ln N_i, y_i = ln v_i over the pairs where both are finite and > 0:
    b = sum((x_i - mean x)(y_i - mean y)) / sum((x_i - mean x)^2). NaN when fewer than
    two such pairs or all N equal. b ~ 1 is a linear scan, b ~ 0 size-independent.

    >>> round(loglog_slope([1000, 10000, 100000], [2.0, 20.0, 200.0]), 6)
    1.0
    >>> loglog_slope([1000], [5.0])
    nan
    """
    pairs = [
        (math.log(n), math.log(v))
        for n, v in zip(sizes, values, strict=True)
        if n > 0 and v > 0 and math.isfinite(n) and math.isfinite(v)
    ]
    if len(pairs) < 2:
        return math.nan
    mx = sum(x for x, _ in pairs) / len(pairs)
    my = sum(y for _, y in pairs) / len(pairs)
    sxx = sum((x - mx) ** 2 for x, _ in pairs)
    if sxx == 0:
        return math.nan
    return sum((x - mx) * (y - my) for x, y in pairs) / sxx


# -- child: one row ---------------------------------------------------------------


async def child(args: argparse.Namespace) -> int:
    """Measure one (backend, N) row and write it as JSON to ``--row-json``."""
    import numpy as np

    from dmt_proxy.embedder import LocalEmbedder

    name, size = args.child[0], int(args.child[1])
    inner = LocalEmbedder(runtime=args.embedder_runtime)
    embedder = FillEmbedder(inner)
    topic_vectors = np.asarray(inner.embed([q.format(x=FILLERS[0]) + "\n" + a for q, a in TOPICS]))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("default")
        row = await measure(name, size, args, embedder, topic_vectors)
    # Library warnings say something about scale (Qdrant warns past 20k local points).
    row["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}" for w in caught})
    Path(args.row_json).write_text(json.dumps(row), encoding="utf-8")
    return 0


# -- parent: all rows, results ----------------------------------------------------


def run_row(name: str, size: int, args: argparse.Namespace) -> dict[str, Any]:
    """Run one row in a child process; a failure row carries ``error``."""
    with tempfile.TemporaryDirectory(prefix="memscale-") as tmp:
        out = Path(tmp) / "row.json"
        cmd = [
            sys.executable, str(Path(__file__).resolve()), "--child", name, str(size),
            "--row-json", str(out), "--writes", str(args.writes),
            "--searches", str(args.searches), "--embedder-runtime", args.embedder_runtime,
        ]  # fmt: skip
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=args.row_timeout, check=False)
        except subprocess.TimeoutExpired:
            return {"backend": name, "stored": size,
                    "error": f"did not finish within --row-timeout {args.row_timeout} s"}  # fmt: skip
        wall = time.perf_counter() - t0
        if proc.returncode != 0 or not out.is_file():
            why = f"child exited with {proc.returncode}"
            if proc.returncode == -9:
                why += " (SIGKILL: out of memory?)"
            return {"backend": name, "stored": size, "error": why}
        row: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        row["row_wall_s"] = round(wall, 1)
        return row


def environment(args: argparse.Namespace) -> dict[str, Any]:
    """Machine, load and library versions for the results header."""
    mem_total = math.nan
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            mem_total = int(meminfo.readline().split()[1]) / 1024 / 1024
    except (OSError, ValueError, IndexError):
        pass
    packages = ("mem0ai", "qdrant-client", "langgraph", "langgraph-checkpoint-sqlite", "numpy")
    return {
        "machine": {
            "cpus": os.cpu_count(), "mem_gib": round(mem_total, 1),
            "python": platform.python_version(), "platform": platform.platform(),
        },
        "load_start": round(os.getloadavg()[0], 2),
        "writes": args.writes, "searches": args.searches, "embedder_runtime": args.embedder_runtime,
        "versions": {p: version(p) for p in packages},
    }  # fmt: skip


def slopes(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per backend, the log-log slope of search p50 wall and CPU time over N."""
    out = {}
    for name in dict.fromkeys(r["backend"] for r in rows):
        ok = [r for r in rows if r["backend"] == name and "error" not in r]
        sizes = [float(r["stored"]) for r in ok]
        out[name] = {
            "search_p50": loglog_slope(sizes, [r["search_p50_ms"] for r in ok]),
            "search_cpu_p50": loglog_slope(sizes, [r["search_cpu_p50_ms"] for r in ok]),
        }
    return out


def _f(value: Any, digits: int = 1) -> str:
    if not isinstance(value, int | float) or math.isnan(value):
        return "–"
    return f"{value:,.{digits}f}"


def markdown(result: dict[str, Any], png_name: str) -> str:
    """The results file: one table, the slopes, notes and the rerun command."""
    env = result["env"]
    lines = [
        "# Memory retrieval scaling (1k -> 10k -> 100k memories)",
        "",
        f"Measured {result['when']} on {env['machine']['cpus']} CPUs,"
        f" {env['machine']['mem_gib']} GiB, Python {env['machine']['python']}; 1-min load"
        f" average {env['load_start']} at start, {env['load_end']} at the end (shared machine:"
        " wall times are noisy, CPU = process CPU time per operation, all threads). One user"
        " holds all N memories (worst case). Each row is its own process; the fill is not timed"
        " (see `memory_scaling.py`'s docstring for what is). Times in ms, k=5,"
        f" {env['writes']} writes and {env['searches']} searches per row; embedder runtime:"
        f" {env['embedder_runtime']} (one BLAS/torch thread). RSS in MiB: base = embedder loaded, before the backend opens;"
        " peak = timed phase with N memories resident; fill peak = up to the end of the fill."
        " All backends embed through the one shared embedder.",
        "",
        f"![search latency vs N]({png_name})",
        "",
        "| backend | N | search p50 | search p95 | search CPU p50 | search CPU p95 | first search"
        " | write p50 | write p95 | write CPU p50 | query embedding p50 | mean hits | fill (s)"
        " | RSS base | RSS peak | RSS peak - base | RSS fill peak |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['stored']:,} | " + " | ".join(["–"] * 15) + " |")
            notes.append(f"- {r['backend']} @ {r['stored']:,}: not measured: {r['error']}.")
            continue
        cells = [r["search_p50_ms"], r["search_p95_ms"], r["search_cpu_p50_ms"],
                 r["search_cpu_p95_ms"], r["search_first_ms"], r["write_p50_ms"],
                 r["write_p95_ms"], r["write_cpu_p50_ms"], r["embed_p50_ms"], r["mean_hits"],
                 r["fill_s"]]  # fmt: skip
        rss = [r["rss_base_mb"], r["rss_peak_mb"], r["rss_peak_mb"] - r["rss_base_mb"]]
        rss = [*(_f(v, 0) for v in rss), _f(r["rss_fill_peak_mb"], 0)]
        lines.append(
            f"| {r['backend']} | {r['stored']:,} | "
            + " | ".join([_f(c) for c in cells] + rss)
            + " |"
        )
        notes += [f"- {r['backend']} @ {r['stored']:,}: {w}" for w in r.get("warnings", [])]
    lines += [
        "",
        "Growth: slope b of log(search p50) against log(N) (least squares over the measured"
        " sizes; b ~ 1 = linear scan, b ~ 0 = flat; wall includes the ~constant query embedding,"
        " so CPU and wall slopes are flattened by it at small N):",
        "",
        "| backend | wall p50 slope | CPU p50 slope |",
        "|---|---:|---:|",
    ]
    for name, s in result["slopes"].items():
        lines.append(f"| {name} | {_f(s['search_p50'], 2)} | {_f(s['search_cpu_p50'], 2)} |")
    if notes:
        lines += ["", "Notes (failures, library warnings raised during a row):", "", *notes]
    versions = ", ".join(f"{k} {v}" for k, v in env["versions"].items())
    lines += ["", f"Versions: {versions}.", "", f"Rerun: `{result['command']}`", ""]
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Search wall p50 (solid) and p95 (dashed), and CPU p50, against N on log axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, (wall, cpu) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name in dict.fromkeys(r["backend"] for r in rows):
        ok = sorted((r for r in rows if r["backend"] == name and "error" not in r),
                    key=lambda r: r["stored"])  # fmt: skip
        if not ok:
            continue
        n = [r["stored"] for r in ok]
        color = COLORS.get(name)
        wall.plot(n, [r["search_p50_ms"] for r in ok], "o-", color=color, label=f"{name} p50")
        wall.plot(n, [r["search_p95_ms"] for r in ok], "s--", color=color, label=f"{name} p95")
        cpu.plot(n, [r["search_cpu_p50_ms"] for r in ok], "o-", color=color, label=name)
    sizes = sorted({r["stored"] for r in rows})
    for ax, title in ((wall, "search latency (wall)"), (cpu, "CPU time per search (p50)")):
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{n / 1000:g}k" if n >= 1000 else str(n) for n in sizes])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_yscale("log")
        ax.set_xlabel("memories stored for the user (N)")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("Memory retrieval scaling per backend (k=5, one user holds all N)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_results(result: dict[str, Any], prefix: Path, final: bool) -> None:
    """JSON after every row; markdown and PNG at the end."""
    write_result(prefix, result)  # before the plot: a failed plot keeps the rows
    if final:
        png = prefix.with_suffix(".png")
        plot(result["rows"], png)
        write_result(prefix, result, markdown(result, png.name))
        md = prefix.with_suffix(".md")
        print(f"wrote {prefix.with_suffix('.json')}, {png}, {md}", file=sys.stderr)


def parent(args: argparse.Namespace, argv: list[str]) -> int:
    """All rows, sizes ascending; a backend that fails is not run at larger sizes."""
    command = "python benchmarks/perf/memory_scaling.py " + " ".join(argv)
    result: dict[str, Any] = {
        "benchmark": "memory_scaling", "version": RESULT_VERSION,
        "when": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command.strip(), "env": environment(args), "rows": [],
    }  # fmt: skip
    failed: dict[str, int] = {}
    for size in sorted(args.sizes):
        for name in args.backends:
            if name in failed:
                row = {"backend": name, "stored": size,
                       "error": f"skipped: failed at {failed[name]:,}"}  # fmt: skip
            else:
                print(f"{name} @ {size:,} ...", file=sys.stderr)
                row = run_row(name, size, args)
                if "error" in row:
                    failed[name] = size
                    print(f"  {name} @ {size:,}: {row['error']}", file=sys.stderr)
            result["rows"].append(row)
            write_results(result, args.out_prefix, final=False)
    result["env"]["load_end"] = round(os.getloadavg()[0], 2)
    result["slopes"] = slopes(result["rows"])
    write_results(result, args.out_prefix, final=True)
    return 1 if failed and len(failed) == len(args.backends) else 0


def main(argv: list[str] | None = None) -> int:
    """CLI entry: the parent by default, one row with ``--child``."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--writes", type=int, default=40)
    parser.add_argument("--searches", type=int, default=60)
    parser.add_argument("--embedder-runtime", default="numpy",
                        choices=("numpy", "sentence-transformers"))  # fmt: skip
    parser.add_argument("--row-timeout", type=float, default=900.0, help="seconds per row")
    parser.add_argument(
        "--out-prefix", type=Path, default=RESULTS / "perf" / "memory_scaling" / "memory_scaling"
    )
    parser.add_argument("--child", nargs=2, metavar=("BACKEND", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--row-json", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.sizes):
        parser.error("--sizes must be positive")
    if args.child:
        return asyncio.run(child(args))
    return parent(args, argv)


if __name__ == "__main__":
    sys.exit(main())
