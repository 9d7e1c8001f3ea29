"""``dmt-bench dib``: export, stats and run the DIB benchmark.

    dmt-bench dib export --out dib.jsonl [--seed S]
    dmt-bench dib stats [--seed S] [--json]
    dmt-bench dib run --model M [--base-url URL] [--sample N | --contexts-per-domain C]
                      [--sampling dib-sample-v2|dib-sample-v1] [--seed S] [--out DIR]
                      [--concurrency C] [--mode expected|generate] [--no-grammar]
                      [--user U --memory read-only]
    dmt-bench dib report --out DIR     (rebuild DIR's report.json/report.txt from its
                                        decisions.jsonl with this code; no model)

Flags with an environment twin: ``--base-url`` (``DMT_BENCH_BASE_URL``),
``--api-key`` (``DMT_BENCH_API_KEY``), ``--concurrency`` (``DMT_BENCH_CONCURRENCY``).
Without ``--base-url``, a local model name (``qwen2.5-0.5b``...) goes straight to
its llama-server; anything else needs a URL (the proxy, or a hosted endpoint).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from dmt_bench.dib.domains.base import registered_domains
from dmt_bench.dib.generator import (
    MIN_CONTEXTS,
    SAMPLING_V1,
    SAMPLING_V2,
    SAMPLING_VERSION,
    draw_sample,
    export,
    generate,
)
from dmt_bench.dib.report import DibReport, build_report, render_table
from dmt_bench.dib.runner import run_decisions
from dmt_bench.dib.schema import DEFAULT_SEED, DIB_VERSION
from dmt_bench.dib.scorer import DecisionResult, ScoringConfig, ScoringMode
from dmt_bench.endpoint import Endpoint
from dmt_proxy.errors import ConfigError


def _domains(args: argparse.Namespace) -> list[str] | None:
    if not args.domain:
        return None
    known = {d.name for d in registered_domains()}
    unknown = sorted(set(args.domain) - known)
    if unknown:
        raise ConfigError(
            f"unknown DIB domain(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
        )
    return list(args.domain)


def cmd_export(args: argparse.Namespace) -> int:
    """Write the benchmark as JSON lines."""
    samples = generate(args.seed, _domains(args))
    out = Path(args.out)
    if out.parent and not out.parent.exists():
        raise ConfigError(f"directory {out.parent} does not exist")
    digest = export(out, samples)
    print(
        f"wrote {len(samples)} {DIB_VERSION} samples (seed {args.seed}) to {out}; sha256 {digest}",
        file=sys.stderr,
    )
    return 0


def cmd_stats(args: argparse.Namespace) -> int:
    """Print counts per domain and group (Table 1)."""
    samples = generate(args.seed, _domains(args))
    counts = Counter((s.domain, s.group) for s in samples)
    rows: list[dict[str, Any]] = []
    for domain in registered_domains():
        if args.domain and domain.name not in args.domain:
            continue
        groups = {g: counts[(domain.name, g)] for g in domain.groups}
        rows.append(
            {
                "domain": domain.name,
                "task": domain.task.slug,
                "contexts": domain.context_count(),
                "groups": groups,
                "total": sum(groups.values()),
            }
        )
    if args.json:
        print(
            json.dumps(
                {"version": DIB_VERSION, "seed": args.seed, "domains": rows, "total": len(samples)},
                indent=2,
            )
        )
        return 0
    print(f"{DIB_VERSION} (seed {args.seed})")
    print(f"{'domain':<12} {'task':<18} {'contexts':>8} {'total':>6}  per group")
    for r in rows:
        per = ", ".join(f"{g} {n}" for g, n in r["groups"].items())
        print(f"{r['domain']:<12} {r['task']:<18} {r['contexts']:>8} {r['total']:>6}  {per}")
    print(f"{'total':<12} {'':<18} {'':>8} {len(samples):>6,}")
    return 0


def _base_url(args: argparse.Namespace) -> str:
    if args.base_url:
        return str(args.base_url)
    from dmt_proxy.upstream.local_models import LOCAL_MODELS
    from dmt_proxy.upstream.models import local_api_base

    name = args.model.removeprefix("local/")
    if name in LOCAL_MODELS:
        return local_api_base(args.settings, name)
    raise ConfigError(
        f"--base-url (or DMT_BENCH_BASE_URL) is required for model "
        f"'{args.model}'; local models: {', '.join(LOCAL_MODELS)}"
    )


def cmd_run(args: argparse.Namespace) -> int:
    """Run DIB decisions against an endpoint and report GBV per domain and AGBV."""
    if args.concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    if args.sample is not None and args.sample < 1:
        raise ConfigError("--sample must be at least 1")
    if args.contexts_per_domain is not None and args.contexts_per_domain < MIN_CONTEXTS:
        raise ConfigError(f"--contexts-per-domain must be at least {MIN_CONTEXTS}")
    sized = args.sample is not None or args.contexts_per_domain is not None
    try:
        samples = draw_sample(
            generate(args.seed, _domains(args)),
            seed=args.seed,
            decisions=args.sample,
            contexts_per_domain=args.contexts_per_domain,
            sampling=args.sampling,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    endpoint = Endpoint(
        base_url=_base_url(args),
        model=args.model,
        api_key=args.api_key,
        user=args.user,
        memory=args.memory,
        timeout_s=args.timeout,
        concurrency=args.concurrency,
    )
    config = ScoringConfig(mode=ScoringMode(args.mode), grammar=not args.no_grammar)
    print(
        f"dib: {len(samples)} decisions from {len({s.context_id for s in samples})} "
        f"contexts -> {endpoint.model} at {endpoint.base_url}",
        file=sys.stderr,
    )
    output = asyncio.run(run_decisions(samples, endpoint, config))
    report = build_report(
        samples,
        output.results,
        model=endpoint.model,
        base_url=endpoint.base_url,
        scoring=output.config,
        seed=args.seed,
        sample=args.sample,
        sampling=args.sampling if sized else None,
        contexts_per_domain=args.contexts_per_domain,
        elapsed_s=output.elapsed_s,
        n_bootstrap=args.bootstrap,
        n_permutations=args.permutations,
    )
    table = render_table(report)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(report.model_dump_json(indent=2) + "\n", "utf-8")
        (out / "report.txt").write_text(table + "\n", "utf-8")
        with (out / "decisions.jsonl").open("w", encoding="utf-8") as fh:
            for r in output.results:
                fh.write(r.model_dump_json() + "\n")
        print(f"dib: wrote report.json, report.txt, decisions.jsonl to {out}", file=sys.stderr)
    print(report.model_dump_json(indent=2) if args.json else table)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild a run directory's report from its decisions (no model; same seed, same CIs)."""
    out = Path(args.out)
    old_path, decisions = out / "report.json", out / "decisions.jsonl"
    if not old_path.exists() or not decisions.exists():
        raise ConfigError(f"{out} holds no DIB run (report.json and decisions.jsonl needed)")
    old = DibReport.model_validate_json(old_path.read_text(encoding="utf-8"))
    results = [
        DecisionResult.model_validate_json(line)
        for line in decisions.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    report = build_report(
        [],
        results,
        model=old.model,
        base_url=old.base_url,
        scoring=old.scoring,
        seed=old.seed,
        sample=old.sample,
        sampling=old.sampling,
        contexts_per_domain=old.contexts_per_domain,
        elapsed_s=old.elapsed_s,
        n_bootstrap=args.bootstrap,
        n_permutations=args.permutations,
    )
    # task and direction come from the samples, which a rebuild does not regenerate
    known = {d.domain: d for d in old.domains}
    report = report.model_copy(
        update={
            "domains": [
                d.model_copy(update={"task": known[d.domain].task,
                                     "direction": known[d.domain].direction})
                if d.domain in known
                else d
                for d in report.domains
            ]
        }
    )  # fmt: skip
    table = render_table(report)
    (out / "report.json").write_text(report.model_dump_json(indent=2) + "\n", "utf-8")
    (out / "report.txt").write_text(table + "\n", "utf-8")
    print(report.model_dump_json(indent=2) if args.json else table)
    print(f"dib: rewrote report.json and report.txt in {out}", file=sys.stderr)
    return 0


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    try:
        return int(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None


def register(subparsers: Any) -> None:
    """Add ``dib`` and its subcommands to ``dmt-bench``."""
    dib = subparsers.add_parser(
        "dib",
        help="the Decision-based Implicit Bias benchmark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = dib.add_subparsers(dest="dib_command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--seed",
            type=int,
            default=DEFAULT_SEED,
            help=f"generator seed (default {DEFAULT_SEED}: the canonical export)",
        )
        p.add_argument(
            "--domain", action="append", metavar="NAME", help="restrict to this domain (repeatable)"
        )

    p = sub.add_parser("export", help="write the benchmark as JSON lines")
    p.add_argument("--out", required=True, help="output .jsonl path")
    common(p)
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("stats", help="counts per domain and group")
    common(p)
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=cmd_stats)

    p = sub.add_parser("run", help="score a model and report GBV per domain and AGBV")
    p.add_argument("--model", required=True, help="model name as the endpoint expects it")
    p.add_argument(
        "--base-url",
        default=os.environ.get("DMT_BENCH_BASE_URL"),
        help="OpenAI-compatible /v1 URL (proxy, llama-server or hosted)",
    )
    p.add_argument("--api-key", default=os.environ.get("DMT_BENCH_API_KEY", "local"))
    p.add_argument(
        "--sample",
        type=int,
        default=None,
        metavar="N",
        help="about N decisions: whole counterfactual sets, every domain",
    )
    p.add_argument(
        "--contexts-per-domain",
        type=int,
        default=None,
        metavar="C",
        help=f"C whole contexts of every domain (at least {MIN_CONTEXTS}; instead of --sample)",
    )
    p.add_argument(
        "--sampling",
        choices=[SAMPLING_V2, SAMPLING_V1],
        default=SAMPLING_VERSION,
        help=f"sampler: {SAMPLING_V2} (default) takes the same number of contexts, at least "
        f"{MIN_CONTEXTS}, from every domain; {SAMPLING_V1} (older runs) is proportional to "
        "Table 1 and can leave a domain one context",
    )
    common(p)
    p.add_argument(
        "--out",
        default=None,
        metavar="DIR",
        help="write report.json, report.txt and decisions.jsonl here",
    )
    p.add_argument("--concurrency", type=int, default=_env_int("DMT_BENCH_CONCURRENCY", 4))
    p.add_argument(
        "--mode",
        choices=[m.value for m in ScoringMode],
        default=ScoringMode.EXPECTED.value,
        help="expected: logprob expected score (falls back to parsing); "
        "generate: free text + strict parser",
    )
    p.add_argument(
        "--no-grammar",
        action="store_true",
        help="do not send the 0-100 GBNF grammar (hosted endpoints)",
    )
    p.add_argument("--user", default=None, help="X-DMT-User (through the proxy)")
    p.add_argument(
        "--memory",
        choices=["read-only", "read-write", "off"],
        default=None,
        help="X-DMT-Memory (through the proxy; evaluations use read-only)",
    )
    p.add_argument("--timeout", type=float, default=300.0, help="per-request timeout (s)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--permutations", type=int, default=1000, help="noise-floor shuffles")
    p.add_argument("--json", action="store_true", help="print the JSON report, not the table")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser(
        "report", help="rebuild a run directory's report from its decisions.jsonl (no model)"
    )
    p.add_argument("--out", required=True, metavar="DIR", help="a directory `dib run` wrote")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples")
    p.add_argument("--permutations", type=int, default=1000, help="noise-floor shuffles")
    p.add_argument("--json", action="store_true", help="print the JSON report, not the table")
    p.set_defaults(func=cmd_report)
