"""``dmt-bench auditor-eval`` and ``dmt-bench first-stage-eval``.

The auditor is reached through litellm, so the same command works for a local
llama-server (``--model qwen2.5-1.5b --base-url http://127.0.0.1:8092/v1``), a
local alias (``--model local/qwen2.5-1.5b``) and a hosted model
(``--model openai/gpt-4o-mini``, key from the provider's usual variable).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from dmt_proxy.errors import ConfigError

DEFAULT_OUT = Path("benchmarks/results")


def resolve_call(args: argparse.Namespace) -> Any:
    """The ``AuditorCall`` for ``--model`` / ``--base-url`` / ``--api-key-env``."""
    from dmt_proxy.audit.auditor import AuditorCall

    overrides = {
        "timeout_s": args.timeout, "structured_output": args.structured_output,
        "max_tokens": args.max_tokens,
    }  # fmt: skip
    api_key = os.environ.get(args.api_key_env) if args.api_key_env else None
    if args.api_key_env and not api_key:
        raise ConfigError(f"--api-key-env {args.api_key_env}: the variable is not set")
    model: str = args.model
    if args.base_url:
        # An OpenAI-compatible server (llama-server answers to its alias).
        name = model.removeprefix("local/")
        litellm_model = name if "/" in name else f"openai/{name}"
        return AuditorCall(
            model=litellm_model, api_base=args.base_url, api_key=api_key or "local",
            label=model, **overrides,
        )  # fmt: skip
    if model.startswith("local/"):
        from dmt_proxy.policy import Policy
        from dmt_proxy.settings import Settings
        from dmt_proxy.upstream.registry import ModelRegistry

        route = ModelRegistry(Settings.from_env(), Policy(), frozenset()).resolve(model)
        return AuditorCall.from_route(route, **overrides)
    if "/" not in model:
        raise ConfigError(
            f"--model {model}: give a litellm name with a provider prefix (openai/gpt-4o-mini), "
            "a local alias (local/qwen2.5-1.5b), or --base-url for an OpenAI-compatible server"
        )
    return AuditorCall(model=model, api_key=api_key, label=model, **overrides)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def run_auditor_eval(args: argparse.Namespace) -> int:
    """Entry point of ``dmt-bench auditor-eval``."""
    from dmt_proxy.audit.auditor import LLMAuditor
    from dmt_proxy.bench.auditor_eval.dataset import DATASET_VERSION, STRATEGIES, load_items, select
    from dmt_proxy.bench.auditor_eval.metrics import summarize
    from dmt_proxy.bench.auditor_eval.report import RunInfo, write_reports
    from dmt_proxy.bench.auditor_eval.runner import run_items
    from dmt_proxy.domains import DOMAINS
    from dmt_proxy.upstream.litellm_model import LiteLLMChatModel

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    call = resolve_call(args)
    items = select(load_items(args.dataset), split=args.split, limit=args.limit, seed=args.seed)
    dataset = args.dataset.stem if args.dataset else DATASET_VERSION
    auditor = LLMAuditor(LiteLLMChatModel(), call, prompt_version=args.prompt)
    print(f"auditor-eval: {len(items)} items, auditor {auditor.label}, concurrency "
          f"{args.concurrency}", file=sys.stderr)  # fmt: skip
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()
    results = asyncio.run(run_items(auditor, items, concurrency=args.concurrency, tau=args.tau))
    summary = summarize(
        [r.prediction() for r in results], args.tau, domains=DOMAINS, strategies=STRATEGIES
    )
    info = RunInfo(
        model=args.model, litellm_model=call.model, api_base=call.api_base,
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
