"""``dmt-bench dose``: the memory dose–response experiment (issue 18).

    dmt-bench dose --config benchmarks/configs/dose_local.yaml --out RUN_DIR [--dry-run]
    dmt-bench dose --out RUN_DIR --resume
    dmt-bench dose --sources age --doses 0,3 --modes off,dmt --contexts 2 --out RUN_DIR
    dmt-bench dose-report --out RUN_DIR
    dmt-bench dose --config C --dry-run --no-probe \\
        --latencies-from benchmarks/results/dose/dose_local --latencies-k 3

The cost estimate is printed before every run (``--dry-run`` prints only it);
``--latencies-from`` prices it with another run's measured rates (``--latencies-k``:
those of its cells with K memories). A config with a
``preregistration`` starts only from a committed, unmodified pre-registration file
(its commit and SHA-256 go into the run's manifest), and its report checks the
endpoints against that commit (``dose/preregistration.py``).
Exit codes: 0 done, 2 configuration error, 3 stopped resumably, 4 report written but
the pre-registered endpoints are not reported as primary (they changed after the run
started, or the record cannot be verified).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from dmt_bench.dose.config import DoseConfig, load_dose_config, parse_dose_config
from dmt_proxy.errors import ConfigError, RunInterrupted, UpstreamError


def _csv(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def config_from_args(args: argparse.Namespace) -> DoseConfig:
    """The config file (or the one a resumed run recorded), with the flags on top."""
    raw: dict[str, Any]
    if args.config:
        raw = load_dose_config(Path(args.config)).model_dump(mode="json")
    elif args.resume and args.out:
        from dmt_bench.harness.rundir import MANIFEST, Manifest

        path = Path(args.out) / MANIFEST
        if not path.exists():
            raise ConfigError(f"nothing to resume: {path} does not exist")
        raw = Manifest.model_validate_json(path.read_text(encoding="utf-8")).config
    else:
        raw = {}
    flags: dict[str, Any] = {
        "sources": _csv(args.sources),
        "doses": [int(k) for k in _csv(args.doses) or []] or None,
        "modes": _csv(args.modes),
        "kinds": _csv(args.kinds),
        "memory": args.memory,
    }
    raw.update({k: v for k, v in flags.items() if v is not None})
    if args.model:
        raw.setdefault("models", {})["agent"] = args.model
    if args.auditor_model:
        raw.setdefault("models", {})["auditor"] = args.auditor_model
    if args.contexts:
        raw.setdefault("dib", {})["contexts_per_domain"] = args.contexts
    if args.proxy_url:
        raw.setdefault("execution", {})["proxy_url"] = args.proxy_url
    return parse_dose_config(raw, where="dose options")


def _default_out(config: DoseConfig) -> Path:
    import time

    return Path("dmt-bench-runs") / f"{config.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _registered(config: DoseConfig) -> DoseConfig:
    """The config with its pre-registration's commit and digest (refused if uncommitted)."""
    from dmt_bench.dose import preregistration as p

    ref = config.preregistration
    if ref is None:
        return config
    root = p.repo_root(Path.cwd())
    if ref.commit is not None:  # a resumed run: the recorded commit stays
        return config
    p.check_against_config(p.load_preregistration(root / ref.path), config)
    return config.model_copy(update={"preregistration": p.resolve(ref, root)})


def cmd_dose(args: argparse.Namespace) -> int:
    from dmt_bench.dose import estimate
    from dmt_bench.dose.runner import run_dose

    config = config_from_args(args)
    out = Path(args.out) if args.out else _default_out(config)
    if args.latencies_from:
        runs = [Path(r) for r in args.latencies_from]
        latencies = estimate.latencies_from_other_run(runs, k=args.latencies_k)
        label = "runs " + ", ".join(r.name for r in runs)
        if args.latencies_k is not None:
            label += f" (k = {args.latencies_k} cells)"
    else:
        latencies, label = estimate.latencies(
            config,
            out if args.resume else None,
            live=args.dry_run and not args.no_probe,
            settings=args.settings,
        )
    est = estimate.build(config, out if args.resume else None, latencies, label)
    print(estimate.render(est), file=sys.stdout if args.dry_run else sys.stderr)
    if args.dry_run:
        return 0
    config = _registered(config)
    print(f"dmt-bench dose: run directory {out}", file=sys.stderr)
    try:
        run = asyncio.run(run_dose(config, out, settings=args.settings, resume=args.resume))
    except (UpstreamError, RunInterrupted) as exc:  # a model failed, or the run stopped
        print(
            f"dmt-bench dose: stopped: {exc}\nThe run is resumable: "
            f"dmt-bench dose --out {out} --resume",
            file=sys.stderr,
        )
        return 3
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run recorded where it stopped
        print(f"dmt-bench dose: resumable: dmt-bench dose --out {out} --resume", file=sys.stderr)
        raise
    return _report(config, out, args.json, wall_s=run.wall_s())


def _report(config: DoseConfig, out: Path, as_json: bool, *, wall_s: float) -> int:
    from dmt_bench.dose import cells, report
    from dmt_bench.dose import preregistration as p
    from dmt_bench.dose.results import build_results
    from dmt_bench.harness.rundir import MANIFEST, Manifest

    registration = None
    if config.preregistration is not None:
        try:
            root = p.repo_root(Path.cwd())
        except ConfigError:
            root = Path.cwd()
        registration = p.check(config.preregistration, root)
    scopes = [s for s in (cells.read_scope(out, k) for k in cells.scopes(config)) if s]
    results = build_results(
        config, cells.read_cells(out, config), scopes, wall_s=wall_s, registration=registration
    )
    manifest = Manifest.model_validate_json((out / MANIFEST).read_text(encoding="utf-8"))
    report.write_report(results, out, sittings=manifest.sittings)
    print(results.model_dump_json(indent=2) if as_json else report.render_text(results))
    print(
        f"dmt-bench dose: wrote results.json, report.md, report.html and figures to {out}",
        file=sys.stderr,
    )
    if registration is not None and registration.status != "primary":
        print(f"dmt-bench dose: {registration.message}", file=sys.stderr)
        return p.EXIT_NOT_PRIMARY
    return 0


def cmd_dose_report(args: argparse.Namespace) -> int:
    """Rebuild a dose run's results and reports from its records (finished or not; no model)."""
    from dmt_bench.harness.rundir import MANIFEST, Manifest

    out = Path(args.out)
    path = out / MANIFEST
    if not path.exists():
        raise ConfigError(f"{out} holds no run ({MANIFEST} missing)")
    manifest = Manifest.model_validate_json(path.read_text(encoding="utf-8"))
    config = parse_dose_config(manifest.config, where=str(path))
    return _report(config, out, args.json, wall_s=manifest.elapsed_s)


def register(subparsers: Any) -> None:
    """Add ``dose`` and ``dose-report`` to ``dmt-bench``."""
    p = subparsers.add_parser(
        "dose",
        help="memory dose–response: seed k memories, ask DIB read-only in every mode",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--config", help="dose YAML (e.g. benchmarks/configs/dose_local.yaml)")
    p.add_argument(
        "--out", metavar="DIR", help="run directory (default dmt-bench-runs/<name>-<time>)"
    )
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--dry-run", action="store_true", help="print the cost estimate and exit")
    p.add_argument("--no-probe", action="store_true", help="estimate without a live latency probe")
    p.add_argument(
        "--latencies-from",
        metavar="RUN_DIR",
        action="append",
        help="price the estimate with other dose runs' measured seconds per call "
        "(repeatable; the first run with a rate gives it)",
    )
    p.add_argument(
        "--latencies-k",
        type=int,
        metavar="K",
        help="with --latencies-from: price memory decisions by its cells with K memories "
        "(the ones whose memory block is the planned one's size)",
    )
    p.add_argument("--sources", help="source domains of the biased memories (comma-separated)")
    p.add_argument("--doses", help="k values, comma-separated, including 0 (default 0,1,3,10)")
    p.add_argument(
        "--modes", help="modes, comma-separated (default off,ssp,dmt,dmt-tags,dmt-instruction)"
    )
    p.add_argument("--kinds", help="biased,neutral (default both)")
    p.add_argument("--contexts", type=int, help="DIB contexts per domain (>= 2; default 4)")
    p.add_argument("--model", help="agent model")
    p.add_argument("--auditor-model", help="auditor model")
    p.add_argument("--memory", help="memory backend (default mem0)")
    p.add_argument("--proxy-url", help="a running proxy's /v1 URL (admin key in $DMT_ADMIN_KEY)")
    p.add_argument("--json", action="store_true", help="print the results JSON, not the tables")
    p.set_defaults(func=cmd_dose)
    r = subparsers.add_parser(
        "dose-report", help="rebuild a dose run's results and reports from its records"
    )
    r.add_argument("--out", required=True, metavar="DIR", help="the run directory")
    r.add_argument("--json", action="store_true", help="print the results JSON, not the tables")
    r.set_defaults(func=cmd_dose_report)
