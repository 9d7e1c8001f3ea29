"""``dmt-bench auditor-eval`` and ``dmt-bench first-stage-eval``.

The auditor is reached as the proxy reaches it (``upstream.factory``: the direct
path for OpenAI-compatible servers, litellm for other providers), so the same
command works for a local llama-server (``--model qwen2.5-1.5b --base-url
http://127.0.0.1:8092/v1``), a local alias (``--model local/qwen2.5-1.5b``) and a
hosted model (``--model openai/gpt-4o-mini``, key from the provider's usual variable).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dmt_proxy.errors import ConfigError

if TYPE_CHECKING:
    from dmt_proxy.audit.auditor import AuditorOptions
    from dmt_proxy.upstream.base import ModelEndpoint

DEFAULT_OUT = Path("benchmarks/results")


def resolve_endpoint(args: argparse.Namespace) -> ModelEndpoint:
    """The auditor's endpoint for ``--model`` / ``--base-url`` / ``--api-key-env`` (the factory's)."""
    from dmt_proxy.settings import Settings
    from dmt_proxy.upstream.factory import declared_endpoint

    endpoint = declared_endpoint(
        Settings.from_env(), args.model, api_base=args.base_url, api_key_env=args.api_key_env
    )
    return endpoint.with_limits(timeout_s=args.timeout)


def auditor_options(args: argparse.Namespace) -> AuditorOptions:
    """How the auditor asks, from ``--structured-output`` and ``--max-tokens``."""
    from dmt_proxy.audit.auditor import AuditorOptions

    return AuditorOptions(structured_output=args.structured_output, max_tokens=args.max_tokens)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def run_auditor_eval(args: argparse.Namespace) -> int:
    """Entry point of ``dmt-bench auditor-eval``."""
    from dmt_proxy.audit.auditor import LLMAuditor
    from dmt_proxy.bench.auditor_eval.dataset import DATASET_VERSION, STRATEGIES, load_items, select
    from dmt_proxy.bench.auditor_eval.metrics import summarize
    from dmt_proxy.bench.auditor_eval.report import RunInfo, write_reports
    from dmt_proxy.bench.auditor_eval.runner import ItemResult, run_items
    from dmt_proxy.domains import DOMAINS
    from dmt_proxy.settings import Settings
    from dmt_proxy.upstream.factory import build_chat_model

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    endpoint = resolve_endpoint(args)
    items = select(load_items(args.dataset), split=args.split, limit=args.limit, seed=args.seed)
    dataset = args.dataset.stem if args.dataset else DATASET_VERSION
    chat = build_chat_model(Settings.from_env())
    auditor = LLMAuditor(chat, endpoint, options=auditor_options(args), prompt_version=args.prompt)
    print(f"auditor-eval: {len(items)} items, auditor {auditor.label}, concurrency "
          f"{args.concurrency}", file=sys.stderr)  # fmt: skip
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()

    async def run() -> list[ItemResult]:
        try:
            return await run_items(auditor, items, concurrency=args.concurrency, tau=args.tau)
        finally:
            await chat.aclose()

    results = asyncio.run(run())
    summary = summarize(
        [r.prediction() for r in results], args.tau, domains=DOMAINS, strategies=STRATEGIES
    )
    info = RunInfo(
        model=args.model, litellm_model=endpoint.model, api_base=endpoint.api_base,
        prompt_version=args.prompt, dataset=dataset, split=args.split, limit=args.limit,
        structured_output=args.structured_output, concurrency=args.concurrency,
        started_at=started_at, wall_s=time.perf_counter() - t0,
    )  # fmt: skip
    stem = f"auditor_eval_{_slug(args.model)}_{args.prompt}"
    if args.split != "all":
        stem += f"_{args.split}"
    if args.limit:
        stem += f"_n{args.limit}"
    json_path, md_path = write_reports(args.out, stem, info, summary, results)
    o = summary.overall
    print(
        f"precision {o.precision.value:.2f} recall {o.recall.value:.2f} F1 {o.f1.value:.2f} "
        f"failure rate {summary.failure_rate.value:.2f}; wrote {md_path} and {json_path}",
        file=sys.stderr,
    )
    return 0


def register(subparsers: Any) -> None:
    """Add ``auditor-eval`` and ``first-stage-eval`` to ``dmt-bench``."""
    p = subparsers.add_parser(
        "auditor-eval",
        help="precision/recall/F1 of an auditor model on the labelled memory set",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--model", required=True, help="litellm model name, local alias, or server alias"
    )
    p.add_argument("--base-url", help="OpenAI-compatible base URL (e.g. http://127.0.0.1:8092/v1)")
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--limit", type=int, help="stratified subset of this many items")
    p.add_argument("--split", choices=("all", "train", "test"), default="all")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="report directory")
    p.add_argument("--tau", type=float, default=0.5, help="decision threshold (default 0.5)")
    p.add_argument("--concurrency", type=int, default=2, help="parallel auditor calls (default 2)")
    p.add_argument("--prompt", default="auditor_v2", help="auditor prompt version (default v2)")
    p.add_argument("--dataset", type=Path, help="JSONL evaluation set (default: shipped v1)")
    p.add_argument(
        "--structured-output", choices=("json_schema", "json_object", "none"), default="json_schema"
    )
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per auditor call")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--seed", type=int, default=0, help="seed of the stratified subset")
    p.set_defaults(func=run_auditor_eval)

    from dmt_proxy.bench.auditor_eval.first_stage_eval import register_first_stage

    register_first_stage(subparsers)
