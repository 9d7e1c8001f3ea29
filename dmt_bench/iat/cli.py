"""``dmt-bench iat`` (run the probe) and ``dmt-bench iat-drift`` (compare results, or probe a run).

``iat-drift`` either compares result files made earlier, or (``--run``) probes a
finished compare run's memory live: see ``live``.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import sys
from pathlib import Path
from typing import Any

from dmt_bench.endpoint import Endpoint
from dmt_bench.iat.drift import compare_results, drift_markdown, drift_text
from dmt_bench.iat.probe import ProbeSettings, parse_templates, run_probe, write_probe
from dmt_bench.iat.report import Row, detail_text, table3_text
from dmt_bench.iat.results import read_result
from dmt_bench.iat.stimuli import parse_categories
from dmt_proxy.errors import ConfigError, UpstreamError

DEFAULT_RUNS = 20
DEFAULT_CONCURRENCY = 4
# iat-drift options that only apply to the live mode (--run)
LIVE_ONLY: tuple[str, ...] = (
    *("arch", "conditions", "model", "proxy_url", "runs", "categories", "templates"),
    *("concurrency", "temperature", "seed", "max_tokens", "json_mode", "resume"),
)


def register(subparsers: Any) -> None:
    """Add the ``iat`` and ``iat-drift`` commands to ``dmt-bench``."""
    p = subparsers.add_parser(
        "iat",
        help="implicit (IAT) vs explicit (self-reflection) bias probe, paper Table 3",
        description="Run the implicit and explicit stereotype tests of Zhao et al. (2025) "
        "against an OpenAI-compatible endpoint or through the dmt-proxy.",
    )
    p.add_argument("--model", required=True, help="model name as the endpoint expects it")
    p.add_argument(
        "--base-url",
        help="OpenAI-compatible /v1 URL (env DMT_BENCH_BASE_URL)",
    )
    p.add_argument(
        "--through-proxy",
        metavar="URL",
        help="dmt-proxy /v1 URL; sends X-DMT-User and X-DMT-Memory (needs --user)",
    )
    p.add_argument("--user", help="simulated user whose memory the proxy uses")
    p.add_argument(
        "--memory",
        choices=("read-only", "off"),
        default="read-only",
        help="X-DMT-Memory through the proxy (default read-only: probes are never stored)",
    )
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS, help="runs per template variant (20)")
    p.add_argument("--categories", nargs="+", help="subset, e.g. race age (default: all six)")
    p.add_argument("--templates", help="template numbers to use, e.g. 1,3 (default: all five)")
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0, help="base seed of the trial plans")
    p.add_argument("--max-tokens", type=int, help="override both tests' max_tokens")
    p.add_argument("--json-mode", action="store_true", help="send response_format json_object")
    p.add_argument("--timeout", type=float, default=300.0, help="per-request timeout (s)")
    p.add_argument("--api-key", default=os.environ.get("DMT_BENCH_API_KEY", "local"))
    p.add_argument("--label", help="name of this run in reports (default: the model)")
    p.add_argument(
        "--out", type=Path, help="output dir (default benchmarks/results/iat/<model>_<time>)"
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the interrupted run in --out (trials are logged to iat_trials.jsonl)",
    )
    p.set_defaults(func=run_iat_command)

    r = subparsers.add_parser(
        "iat-report",
        help="rebuild a probe directory's iat_report.md from its iat_result.json (no model)",
    )
    r.add_argument("--out", type=Path, required=True, metavar="DIR", help="a probe directory")
    r.add_argument("--label", help="name of the run in the report (default: the result's)")
    r.set_defaults(func=report_iat_command)

    d = subparsers.add_parser(
        "iat-drift",
        help="IAT with memory: t=0 vs t=T, no mitigation vs DMT (live, or from result files)",
        description="Report implicit and explicit SC change per category, with 95 % CIs, "
        "of each result against a baseline. With --run, first probe a finished compare run's "
        "memory through the proxy (read-only): per condition a fresh user (t0) and the "
        "simulated user at the end of the run (T).",
    )
    d.add_argument("results", nargs="*", help="result JSON files, each PATH or LABEL=PATH")
    d.add_argument("--run", type=Path, metavar="RUN_DIR", help="a finished compare run to probe")
    d.add_argument("--arch", help="memory architecture of the run (default: its only one)")
    d.add_argument("--conditions", help="comma-separated (default: baseline,dmt)")
    d.add_argument("--model", help="agent model (default: the run's agent model)")
    d.add_argument(
        "--proxy-url",
        metavar="URL",
        help="running proxy that holds the run's memory (default: the run's execution.proxy_url, "
        "else a managed proxy over a copy of <run>/<arch>/proxy/state)",
    )
    d.add_argument("--runs", type=int, help=f"runs per template variant ({DEFAULT_RUNS})")
    d.add_argument("--categories", nargs="+", help="subset, e.g. race age (default: all six)")
    d.add_argument("--templates", help="template numbers to use, e.g. 1,3 (default: all five)")
    d.add_argument("--concurrency", type=int, help=f"parallel requests ({DEFAULT_CONCURRENCY})")
    d.add_argument("--temperature", type=float, help="sampling temperature (0)")
    d.add_argument("--seed", type=int, help="base seed of the trial plans (0)")
    d.add_argument("--max-tokens", type=int, help="override both tests' max_tokens")
    d.add_argument("--json-mode", action="store_true", default=None, help="response_format json")
    d.add_argument("--timeout", type=float, default=300.0, help="per-request timeout (s)")
    d.add_argument("--resume", action="store_true", default=None, help="continue the run in --out")
    d.add_argument("--baseline", help="label of the baseline (default: the first result)")
    d.add_argument(
        "--out",
        type=Path,
        help="write drift.json and drift.md here (--run: also the probes; default "
        "benchmarks/results/iat/drift_<run name>_<run id>_<arch>)",
    )
    d.set_defaults(func=run_drift_command)


def report_iat_command(args: argparse.Namespace) -> int:
    """Rewrite ``iat_report.md`` of a probe directory from its result file, with this code."""
    from dmt_bench.iat.probe import REPORT_FILE, RESULT_FILE
    from dmt_bench.iat.report import report_markdown

    result = read_result(args.out / RESULT_FILE)
    (args.out / REPORT_FILE).write_text(report_markdown(result, args.label), encoding="utf-8")
    print(f"dmt-bench iat-report: rewrote {args.out / REPORT_FILE}", file=sys.stderr)
    return 0


def _endpoint(args: argparse.Namespace) -> Endpoint:
    if args.through_proxy and args.base_url:
        raise ConfigError("give either --base-url or --through-proxy, not both")
    common = {
        "model": args.model,
        "api_key": args.api_key,
        "timeout_s": args.timeout,
        "concurrency": args.concurrency,
    }
    if args.through_proxy:
        if not args.user:
            raise ConfigError("--through-proxy needs --user (the simulated user's id)")
        return Endpoint(base_url=args.through_proxy, user=args.user, memory=args.memory, **common)
    base_url = args.base_url or os.environ.get("DMT_BENCH_BASE_URL")
    if not base_url:
        raise ConfigError("--base-url (or DMT_BENCH_BASE_URL) or --through-proxy is required")
    if args.user:
        raise ConfigError("--user only applies with --through-proxy")
    return Endpoint(base_url=base_url, **common)


def _default_out(model: str) -> Path:
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("benchmarks/results/iat") / f"{_slug(model)}_{stamp}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "model"


def _settings(args: argparse.Namespace) -> ProbeSettings:
    """Probe settings from the shared options (None where ``iat-drift`` left one unset)."""
    runs = DEFAULT_RUNS if args.runs is None else args.runs
    if runs < 1:
        raise ConfigError("--runs must be at least 1")
    return ProbeSettings(
        runs=runs,
        categories=parse_categories(args.categories),
        templates=parse_templates(args.templates),
        temperature=0.0 if args.temperature is None else args.temperature,
        seed=0 if args.seed is None else args.seed,
        max_tokens=args.max_tokens,
        json_mode=bool(args.json_mode),
        concurrency=DEFAULT_CONCURRENCY if args.concurrency is None else args.concurrency,
    )


def run_iat_command(args: argparse.Namespace) -> int:
    """Run the probe, print Table 3 and the detail table, write JSON and markdown."""
    endpoint = _endpoint(args)
    if args.resume and not args.out:
        raise ConfigError("--resume needs --out (the directory of the interrupted run)")
    out = args.out or _default_out(args.model)
    settings = _settings(args)
    try:
        result = asyncio.run(
            run_probe(
                endpoint,
                settings,
                out,
                through_proxy=bool(args.through_proxy),
                resume=args.resume,
                label=args.label,
            )
        )
    except UpstreamError as exc:
        print(f"dmt-bench iat: {exc}", file=sys.stderr)
        return 1
    label = args.label or args.model
    write_probe(result, out, label)
    print(table3_text([Row(label, result)]))
    print()
    print(detail_text(result))
    print(
        f"iat: wrote {out / 'iat_result.json'} and {out / 'iat_report.md'} "
        f"({result.duration_s:.1f}s)",
        file=sys.stderr,
    )
    errors = sum(1 for t in result.trials if t.outcome == "error")
    if errors:
        print(
            f"iat: warning: {errors} trials failed with errors (excluded from N)", file=sys.stderr
        )
    return 1 if errors == len(result.trials) else 0


def _load_rows(specs: list[str]) -> list[Row]:
    rows: list[Row] = []
    for i, spec in enumerate(specs):
        label, sep, path = spec.partition("=")
        if not sep:
            label, path = "", spec
        result = read_result(Path(path))
        rows.append(Row(label or result.label or f"{result.config.model}#{i + 1}", result))
    return rows


def run_drift_command(args: argparse.Namespace) -> int:
    """Compare result files, or (``--run``) probe a compare run live, and report the drift."""
    if args.run is not None:
        return _run_live(args)
    given = [f"--{n.replace('_', '-')}" for n in LIVE_ONLY if getattr(args, n) is not None]
    if given:
        raise ConfigError(f"{', '.join(given)} only apply with --run RUN_DIR")
    if len(args.results) < 2:
        raise ConfigError("iat-drift needs --run RUN_DIR, or at least two result files")
    rows = _load_rows(args.results)
    report = compare_results(rows, args.baseline)
    print(drift_text(report, rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "drift.json").write_text(
            report.model_dump_json(indent=1) + "\n", encoding="utf-8"
        )
        (args.out / "drift.md").write_text(drift_markdown(report, rows), encoding="utf-8")
        print(
            f"iat-drift: wrote {args.out / 'drift.json'} and {args.out / 'drift.md'}",
            file=sys.stderr,
        )
    return 0


def _run_live(args: argparse.Namespace) -> int:
    # imported here: the live mode needs the simulation package, the rest of the CLI does not
    from dmt_bench.iat.live import LiveOptions, run_live
    from dmt_bench.iat.live_plan import load_compare_run
    from dmt_bench.iat.live_report import live_text, write_live

    if args.results:
        raise ConfigError("give either --run RUN_DIR or result files, not both")
    settings = _settings(args)
    out = args.out
    if out is None:
        run = load_compare_run(args.run)
        arch = args.arch or "-".join(run.config.memory)
        out = Path("benchmarks/results/iat") / _slug(f"drift_{run.config.name}_{run.run_id}_{arch}")
    opts = LiveOptions(
        run_dir=args.run,
        out=out,
        settings=settings,
        arch=args.arch,
        conditions=args.conditions,
        model=args.model,
        proxy_url=args.proxy_url,
        resume=bool(args.resume),
        baseline=args.baseline,
        timeout_s=args.timeout,
    )
    try:
        outcome = asyncio.run(run_live(opts, args.settings))
    except UpstreamError as exc:
        print(f"dmt-bench iat-drift: {exc} (rerun with --resume --out {out})", file=sys.stderr)
        return 1
    write_live(outcome.report, outcome.rows, out)
    print(live_text(outcome.report, outcome.rows))
    print(f"iat-drift: wrote {out / 'drift.md'}, drift.json, live_report.json", file=sys.stderr)
    unique = {id(row.result): row.result for row in outcome.rows}.values()  # t0 may be shared
    errors = sum(1 for result in unique for t in result.trials if t.outcome == "error")
    if errors:
        print(
            f"iat-drift: warning: {errors} trials failed with errors (excluded from N; "
            "--resume asks them again)",
            file=sys.stderr,
        )
    return 0
