"""``dmt-bench compare | heatmap | run``: the long-term simulation (paper §4–§6).

    dmt-bench compare --ssp --dmt [--ssp-dmt] [--dmt-tags] [--dmt-instruction]
                      [--memory mem0,langmem,letta] [--quick]
                      [--model M] [--auditor-model M] [--auditor-prompt P] [--generator-model M]
                      [--lambda L] [--turns T] [--interval D]
                      [--dib-sample N | --dib-contexts C] [--seed S]
                      [--backend-option mem0.infer=true ...]
                      [--out DIR [--resume]] [--proxy-url URL] [--dry-run]
    dmt-bench heatmap [--small] [--memory mem0] [--sources age,race,...] [...same options]
    dmt-bench run --config benchmarks/configs/<name>.yaml [--out DIR] [--resume] [--dry-run]
    dmt-bench run --out DIR --resume          (continue a stopped run with its own config)
    dmt-bench report --out DIR                (rebuild a finished compare run's reports)

Without ``--proxy-url`` a proxy is started per memory architecture (its state in
the run directory) and stopped at the end. Exit status: 0 done, 2 bad
configuration, 3 stopped by an upstream failure (resume with ``--resume``).
Environment twins: ``DMT_BENCH_PROXY_URL`` (``--proxy-url``), ``DMT_MMLU_PRO`` (``--mmlu``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from dmt_bench.sim.config import (
    Condition,
    SimConfig,
    load_config,
    parse_config,
    with_overrides,
)
from dmt_proxy.errors import ConfigError, RunInterrupted, UpstreamError

QUICK: dict[str, Any] = {
    "name": "quick",
    "turns": 10,
    "interval": 5,
    "injection": {"rate": 0.5},
    "dib": {"contexts_per_domain": 2, "permutations": 200},
    "agent": {"max_tokens": 128},
}
"""``--quick``: T=10 and 2 DIB contexts per domain (the fewest with a CI in every domain)."""
PAPER: dict[str, Any] = {
    "name": "compare",
    "turns": 100,
    "interval": 20,
    "injection": {"rate": 0.3},
}
HEATMAP_SMALL: dict[str, Any] = {
    "kind": "heatmap",
    "name": "heatmap-small",
    "turns": 4,
    "interval": 4,
    "injection": {"rate": 1.0},
    "dib": {"contexts_per_domain": 2, "permutations": 200},
    "agent": {"max_tokens": 96},
    "conditions": ["baseline"],
}


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _backend_options(pairs: list[str] | None) -> dict[str, dict[str, Any]] | None:
    """``["mem0.infer=true", "langmem.consolidate=true"]`` → ``{"mem0": {"infer": True}, ...}``."""
    if not pairs:
        return None
    out: dict[str, dict[str, Any]] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        backend, dot, key = name.strip().partition(".")
        if not sep or not dot or not backend or not key:
            raise ConfigError(f"--backend-option wants BACKEND.KEY=VALUE, got {pair!r}")
        out.setdefault(backend, {})[key] = yaml.safe_load(value)
    return out


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "memory": _csv(args.memory),
        "models.agent": {"model": args.model} if args.model else None,
        "models.auditor": {"model": args.auditor_model}
        if getattr(args, "auditor_model", None)
        else None,
        "models.generator": {"model": args.generator_model} if args.generator_model else None,
        "injection.rate": args.rate,
        "injection.intact_policy": args.intact_policy,
        "turns": args.turns,
        "interval": args.interval,
        "dib.sample": args.dib_sample,
        "dib.contexts_per_domain": args.dib_contexts,
        "backend_options": _backend_options(args.backend_option),
        "audit.prompt": getattr(args, "auditor_prompt", None),
        "dib.domains": _csv(args.dib_domains),
        "dib.scoring": args.dib_scoring,
        "dib.grammar": False if args.no_grammar else None,
        "injection.temperature": args.generator_temperature,
        "seed": args.seed,
        "stream.source": args.mmlu,
        "execution.proxy_url": args.proxy_url,
        "execution.admin_key_env": args.admin_key_env,
    }


def _default_out(config: SimConfig) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("dmt-bench-runs") / f"{config.name}-{stamp}"


def _preset(preset: dict[str, Any], args: argparse.Namespace) -> SimConfig:
    """A preset, without its DIB sample size when a flag gives another one."""
    if args.dib_sample is not None or args.dib_contexts is not None:
        preset = {**preset, "dib": {**preset.get("dib", {}), "contexts_per_domain": None}}
    return parse_config(preset, where="preset")


def compare_config(args: argparse.Namespace) -> SimConfig:
    """The config ``dmt-bench compare`` flags describe."""
    base = _preset(QUICK if args.quick else PAPER, args)
    conditions: list[Condition] = ["baseline"]
    if args.ssp:
        conditions.append("ssp")
    if args.dmt:
        conditions.append("dmt")
    if args.dmt_tags:
        conditions.append("dmt-tags")
    if args.dmt_instruction:
        conditions.append("dmt-instruction")
    if args.ssp_dmt:
        conditions.append("ssp+dmt")
    return with_overrides(base, {**_overrides(args), "conditions": conditions})


def heatmap_config(args: argparse.Namespace) -> SimConfig:
    """The config ``dmt-bench heatmap`` flags describe."""
    base = _preset(
        HEATMAP_SMALL
        if args.small
        else {**PAPER, "kind": "heatmap", "name": "heatmap", "conditions": ["baseline"]},
        args,
    )
    return with_overrides(base, {**_overrides(args), "heatmap_sources": _csv(args.sources)})


def dry_run(config: SimConfig, args: argparse.Namespace) -> int:
    """Print the cost estimate and exit without running."""
    from dmt_bench.sim.estimate import (
        build_estimate,
        latencies_from_run,
        probe_latencies,
        render_estimate,
    )
    from dmt_bench.sim.runner import dib_samples

    latencies: dict[str, float] = {}
    label = "assumed"
    if args.latencies:
        latencies, label = latencies_from_run(Path(args.latencies)), f"run {args.latencies}"
    elif not args.no_probe:
        print("dry run: probing each model once for its latency ...", file=sys.stderr)
        try:
            latencies, label = asyncio.run(probe_latencies(config, args.settings)), "probe"
        except Exception as exc:  # any failure just means "no measurement"; say why
            print(
                f"dry run: probe failed ({type(exc).__name__}: {exc}); using assumptions",
                file=sys.stderr,
            )
    est = build_estimate(config, latencies, label, len(dib_samples(config)))
    print(est.model_dump_json(indent=2) if args.json else render_estimate(est))
    return 0


def execute(config: SimConfig, args: argparse.Namespace) -> int:
    """Run (or resume) ``config``; print the table; 3 when stopped resumably."""
    from dmt_bench.harness.progress import Bars
    from dmt_bench.sim import heatmap_report, report, runner

    if args.dry_run:
        return dry_run(config, args)
    out = Path(args.out) if args.out else _default_out(config)
    print(f"dmt-bench {config.kind}: run directory {out}", file=sys.stderr)
    bars = Bars(enabled=not args.no_progress)
    try:
        with bars:
            if config.kind == "heatmap":
                heat = asyncio.run(
                    runner.run_heatmap(
                        config, out, settings=args.settings, resume=args.resume, bars=bars
                    )
                )
                heatmap_report.write_heatmap_report(heat, out)
                text = heatmap_report.render_heatmap_text(heat)
                payload = heat.model_dump_json(indent=2)
            else:
                res = asyncio.run(
                    runner.run_compare(
                        config, out, settings=args.settings, resume=args.resume, bars=bars
                    )
                )
                report.write_compare_report(res, out)
                text, payload = report.render_table2(res), res.model_dump_json(indent=2)
    except (UpstreamError, RunInterrupted) as exc:  # a model failed, or the run stopped
        print(
            f"dmt-bench: stopped: {exc}\nThe run is resumable: dmt-bench run --out {out} --resume",
            file=sys.stderr,
        )
        return 3
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run recorded where it stopped
        print(f"dmt-bench: resumable: dmt-bench run --out {out} --resume", file=sys.stderr)
        raise
    print(payload if args.json else text)
    print(
        f"dmt-bench: wrote results.json, report.md, report.html and figures to {out}",
        file=sys.stderr,
    )
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    return execute(compare_config(args), args)


def cmd_heatmap(args: argparse.Namespace) -> int:
    return execute(heatmap_config(args), args)


def cmd_run(args: argparse.Namespace) -> int:
    if args.config:
        config = load_config(Path(args.config))
    elif args.resume and args.out:
        from dmt_bench.harness.rundir import MANIFEST, Manifest

        path = Path(args.out) / MANIFEST
        if not path.exists():
            raise ConfigError(f"nothing to resume: {path} does not exist")
        manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
        config = parse_config(manifest.config, where=str(path))
    else:
        raise ConfigError("give --config FILE (or --out DIR --resume to continue a run)")
    overrides = {"execution.proxy_url": args.proxy_url} if args.proxy_url else {}
    return execute(with_overrides(config, overrides) if overrides else config, args)


def cmd_report(args: argparse.Namespace) -> int:
    """Rebuild a compare run's results and reports with this code (no model).

    ``--partial``: an unfinished run's audits so far, into ``DIR/partial/``.
    """
    from dmt_bench.sim import report
    from dmt_bench.sim.rebuild import rebuild_compare

    out = Path(args.out)
    results = rebuild_compare(out, partial=args.partial)
    # A partial report goes beside the run's own files, never over them.
    dest = out / "partial" if args.partial else out
    dest.mkdir(exist_ok=True)
    report.write_compare_report(results, dest)
    print(results.model_dump_json(indent=2) if args.json else report.render_table2(results))
    print(f"dmt-bench: wrote results.json, report.md, report.html and figures in {dest}",
          file=sys.stderr)  # fmt: skip
    return 0


def _execution_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--out", metavar="DIR", help="run directory (default dmt-bench-runs/<name>-<time>)"
    )
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument(
        "--proxy-url",
        default=os.environ.get("DMT_BENCH_PROXY_URL"),
        help="use this running proxy (its /v1 URL) instead of starting one",
    )
    p.add_argument("--dry-run", action="store_true", help="print the call count and time estimate")
    p.add_argument("--latencies", metavar="RUN_DIR", help="dry run: latencies of a previous run")
    p.add_argument("--no-probe", action="store_true", help="dry run: no live latency probe")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars (on a terminal) or progress lines (in a log)",
    )
    p.add_argument("--json", action="store_true", help="print the results JSON, not the table")


def _experiment_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--memory", help="memory architectures, comma-separated (mem0,langmem,letta)")
    p.add_argument("--model", help="agent model (local name or litellm name)")
    p.add_argument("--generator-model", help="bias generator model")
    p.add_argument("--lambda", dest="rate", type=float, help="injection rate λ")
    p.add_argument("--turns", type=int, help="T")
    p.add_argument("--interval", type=int, help="Δt between audits")
    p.add_argument("--dib-sample", type=int, help="about N DIB decisions per audit (default full)")
    p.add_argument(
        "--dib-contexts",
        type=int,
        metavar="C",
        help="C whole DIB contexts of every domain per audit (at least 2; instead of --dib-sample)",
    )
    p.add_argument(
        "--backend-option",
        action="append",
        metavar="BACKEND.KEY=VALUE",
        help="a memory backend option for the proxy (mem0.infer=true, langmem.consolidate=true); "
        "repeatable",
    )
    p.add_argument("--dib-domains", help="restrict DIB audits to these domains (comma-separated)")
    p.add_argument(
        "--dib-scoring",
        choices=["expected", "generate"],
        help="expected: log-prob expected score (llama.cpp); generate: parse the answer",
    )
    p.add_argument("--no-grammar", action="store_true", help="no GBNF grammar (hosted models)")
    p.add_argument(
        "--generator-temperature", type=float, help="generator temperature (gpt-5 models: 1)"
    )
    p.add_argument("--seed", type=int, help="stream seed")
    p.add_argument("--mmlu", default=None, help="MMLU-Pro JSON-lines file or hf:TIGER-Lab/MMLU-Pro")
    p.add_argument(
        "--intact-policy",
        choices=["append", "strict"],
        default=None,
        help="what to do with rewrites that lost the verbatim question",
    )
    p.add_argument(
        "--admin-key-env",
        default=None,
        help="with --proxy-url: variable holding its admin key (DMT_ADMIN_KEY)",
    )


def register(subparsers: Any) -> None:
    """Add ``compare``, ``heatmap`` and ``run`` to ``dmt-bench``."""
    fmt = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "compare",
        help="long-term simulation: no mitigation vs SSP vs DMT",
        description=__doc__,
        formatter_class=fmt,
    )
    p.add_argument("--ssp", action="store_true", help="add the static system prompt condition")
    p.add_argument("--dmt", action="store_true", help="add the dynamic memory tagging condition")
    p.add_argument("--ssp-dmt", action="store_true", help="add SSP and DMT together")
    p.add_argument(
        "--dmt-tags", action="store_true", help="add DMT's tags without its instruction (ablation)"
    )
    p.add_argument(
        "--dmt-instruction",
        action="store_true",
        help="add DMT's instruction over untagged memories (ablation)",
    )
    p.add_argument("--auditor-model", help="DMT auditor model")
    p.add_argument(
        "--auditor-prompt", help="auditor prompt version (default: the proxy's, auditor_v2)"
    )
    p.add_argument(
        "--quick", action="store_true", help="small preset (T=10, 2 DIB contexts/domain)"
    )
    _experiment_flags(p)
    _execution_flags(p)
    p.set_defaults(func=cmd_compare)

    p = subparsers.add_parser(
        "heatmap",
        help="single-source injection: 9×9 ΔGBV propagation",
        description=__doc__,
        formatter_class=fmt,
    )
    p.add_argument("--small", action="store_true", help="small preset (T=4, 2 DIB contexts/domain)")
    p.add_argument("--sources", help="injected source domains (default all nine)")
    _experiment_flags(p)
    _execution_flags(p)
    p.set_defaults(func=cmd_heatmap)

    p = subparsers.add_parser(
        "run",
        help="run an experiment config (benchmarks/configs/*.yaml)",
        description=__doc__,
        formatter_class=fmt,
    )
    p.add_argument("--config", help="experiment YAML")
    _execution_flags(p)
    p.set_defaults(func=cmd_run)

    p = subparsers.add_parser(
        "report",
        help="rebuild a compare run's results and reports (no model needed)",
        description=__doc__,
        formatter_class=fmt,
    )
    p.add_argument("--out", required=True, metavar="DIR", help="the run directory")
    p.add_argument(
        "--partial",
        action="store_true",
        help="report the audits made so far of an unfinished run, into DIR/partial/",
    )
    p.add_argument("--json", action="store_true", help="print the results JSON, not the table")
    p.set_defaults(func=cmd_report)
