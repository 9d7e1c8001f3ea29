"""``dmt-bench iat`` (run the probe) and ``dmt-bench iat-drift`` (compare result files)."""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from dmt_proxy.bench.endpoint import Endpoint
from dmt_proxy.bench.iat.drift import compare_results, drift_markdown, drift_text
from dmt_proxy.bench.iat.prompts import PROMPT_VERSION
from dmt_proxy.bench.iat.report import Row, detail_text, report_markdown, table3_text
from dmt_proxy.bench.iat.results import (
    IatResult,
    RunConfig,
    TrialRecord,
    aggregate,
    append_trial,
    read_result,
    read_trial_log,
    write_result,
)
from dmt_proxy.bench.iat.runner import (
    DEFAULT_MAX_TOKENS,
    EndpointChat,
    Progress,
    SamplingConfig,
    run_trials,
)
from dmt_proxy.bench.iat.stimuli import load_stimuli, parse_categories
from dmt_proxy.bench.iat.templates import TEMPLATES_VERSION, VARIANTS, TemplateVariant
from dmt_proxy.bench.iat.trials import PLAN_VERSION, make_plans
from dmt_proxy.errors import ConfigError, UpstreamError

DEFAULT_RUNS = 20


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

    d = subparsers.add_parser(
        "iat-drift",
        help="compare IAT results (e.g. t=0 vs t=T, no mitigation vs DMT)",
        description="Report implicit and explicit SC change per category, with 95%% CIs, "
        "of each result against a baseline.",
    )
    d.add_argument("results", nargs="+", help="result JSON files, each PATH or LABEL=PATH")
    d.add_argument("--baseline", help="label of the baseline (default: the first result)")
    d.add_argument("--out", type=Path, help="also write drift.json and drift.md here")
    d.set_defaults(func=run_drift_command)


def _variants(spec: str | None) -> tuple[TemplateVariant, ...]:
    if not spec:
        return VARIANTS
    try:
        wanted = {int(x) for x in spec.split(",") if x.strip()}
    except ValueError as exc:
        raise ConfigError(f"--templates takes numbers 1-5, got {spec!r}") from exc
    if not wanted or not wanted <= {v.template for v in VARIANTS}:
        raise ConfigError(f"--templates takes numbers 1-5, got {spec!r}")
    return tuple(v for v in VARIANTS if v.template in wanted)


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
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip("-") or "model"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return Path("benchmarks/results/iat") / f"{slug}_{stamp}"


class _ProgressPrinter:
    """Progress lines on stderr: about every 5 % or 10 s, and at the end."""

    def __init__(self) -> None:
        self._last_done = 0
        self._last_t = time.perf_counter()

    def __call__(self, p: Progress) -> None:
        step = max(1, p.total // 20)
        now = time.perf_counter()
        if p.done == p.total or p.done - self._last_done >= step or now - self._last_t >= 10:
            rate = p.elapsed_s / p.done if p.done else 0.0
            print(
                f"iat: {p.done}/{p.total} trials, {p.invalid} invalid, {p.errors} errors, "
                f"{p.elapsed_s:.0f}s ({rate:.2f}s/trial)",
                file=sys.stderr,
                flush=True,
            )
            self._last_done, self._last_t = p.done, now


def _resumable(out: Path, config: RunConfig, resume: bool) -> dict[str, TrialRecord]:
    """Records of an earlier run in ``out`` to reuse (``--resume``); checks it is the same run."""
    config_path, log_path = out / "iat_run.json", out / "iat_trials.jsonl"
    if not resume:
        if log_path.exists():
            raise ConfigError(f"{log_path} exists: pass --resume to continue it, or another --out")
        out.mkdir(parents=True, exist_ok=True)
        config_path.write_text(config.model_dump_json(indent=1) + "\n", encoding="utf-8")
        return {}
    if not config_path.is_file():
        raise ConfigError(f"--resume: no earlier run in {out} ({config_path.name} missing)")
    earlier = RunConfig.model_validate_json(config_path.read_text(encoding="utf-8"))
    if earlier.model_copy(update={"concurrency": 0}) != config.model_copy(
        update={"concurrency": 0}
    ):
        raise ConfigError(f"--resume: the run in {out} used other settings: {earlier}")
    done = {k: r for k, r in read_trial_log(log_path).items() if r.outcome != "error"}
    print(f"iat: resuming, {len(done)} trials already answered", file=sys.stderr)
    return done


async def _run(args: argparse.Namespace, endpoint: Endpoint, out: Path) -> IatResult:
    if args.runs < 1:
        raise ConfigError("--runs must be at least 1")
    stimuli = load_stimuli()
    names = parse_categories(args.categories)
    variants = _variants(args.templates)
    plans = make_plans([stimuli.get(n) for n in names], args.runs, args.seed, variants)
    sampling = SamplingConfig(
        model=endpoint.model_name(),
        temperature=args.temperature,
        max_tokens_implicit=args.max_tokens or DEFAULT_MAX_TOKENS["implicit"],
        max_tokens_explicit=args.max_tokens or DEFAULT_MAX_TOKENS["explicit"],
        json_mode=args.json_mode,
    )
    config = RunConfig(
        model=endpoint.model,
        base_url=endpoint.base_url,
        through_proxy=bool(args.through_proxy),
        user=endpoint.user,
        memory=endpoint.memory,
        runs=args.runs,
        temperature=args.temperature,
        max_tokens_implicit=sampling.max_tokens_implicit,
        max_tokens_explicit=sampling.max_tokens_explicit,
        json_mode=args.json_mode,
        base_seed=args.seed,
        categories=names,
        templates=tuple(v.label for v in variants),
        concurrency=args.concurrency,
    )
    print(
        f"iat: {len(plans) * 2} trials ({len(names)} categories x {len(variants)} templates x "
        f"{args.runs} runs x 2 tests) against {endpoint.base_url} model {endpoint.model}",
        file=sys.stderr,
    )
    done = _resumable(out, config, args.resume)
    log_path = out / "iat_trials.jsonl"
    chat = EndpointChat(endpoint)
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    try:
        await chat.check_reachable()
        trials = await run_trials(
            chat,
            plans,
            sampling,
            concurrency=args.concurrency,
            on_progress=_ProgressPrinter(),
            on_record=lambda record: append_trial(log_path, record),
            done=done,
        )
    finally:
        await chat.close()
    return IatResult(
        label=args.label,
        prompt_version=PROMPT_VERSION,
        templates_version=TEMPLATES_VERSION,
        plan_version=PLAN_VERSION,
        stimuli_version=stimuli.version,
        config=config,
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        resumed_trials=len(done),
        scores=aggregate(trials, names),
        trials=tuple(trials),
    )


def run_iat_command(args: argparse.Namespace) -> int:
    """Run the probe, print Table 3 and the detail table, write JSON and markdown."""
    endpoint = _endpoint(args)
    if args.resume and not args.out:
        raise ConfigError("--resume needs --out (the directory of the interrupted run)")
    out = args.out or _default_out(args.model)
    try:
        result = asyncio.run(_run(args, endpoint, out))
    except UpstreamError as exc:
        print(f"dmt-bench iat: {exc}", file=sys.stderr)
        return 1
    label = args.label or args.model
    write_result(result, out / "iat_result.json")
    (out / "iat_report.md").write_text(report_markdown(result, label), encoding="utf-8")
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
    """Compare result files against a baseline and print (and optionally write) the report."""
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
