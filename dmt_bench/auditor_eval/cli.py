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
    from dmt_proxy.settings import Settings
    from dmt_proxy.upstream.base import ModelEndpoint

DEFAULT_OUT = Path("benchmarks/results")


def resolve_endpoint(args: argparse.Namespace, settings: Settings) -> ModelEndpoint:
    """The auditor's endpoint for ``--model`` / ``--base-url`` / ``--api-key-env`` (the factory's)."""
    from dmt_proxy.upstream.factory import declared_endpoint

    endpoint = declared_endpoint(
        settings, args.model, api_base=args.base_url, api_key_env=args.api_key_env
    )
    return endpoint.with_limits(timeout_s=args.timeout)


def auditor_options(args: argparse.Namespace) -> AuditorOptions:
    """How the auditor asks: ``--verdict``, ``--grammar``, ``--rationale``, output format."""
    from dmt_proxy.audit.auditor import AuditorOptions

    return AuditorOptions(
        structured_output=args.structured_output, max_tokens=args.max_tokens,
        verdict=getattr(args, "verdict", "auto"), grammar=getattr(args, "grammar", True),
        rationale=getattr(args, "rationale", True), calibrate=getattr(args, "calibrate", True),
        kind_question=True if getattr(args, "kind_question", False) else None,
    )  # fmt: skip


def dataset_file(name: str | Path | None) -> Path:
    """A shipped set by name (``auditor_eval_v2``) or a JSONL path; default v1."""
    from dmt_bench.auditor_eval.dataset import DATASET_VERSION, dataset_path

    if name is None:
        return dataset_path(DATASET_VERSION)
    path = Path(name)
    return path if path.suffix == ".jsonl" or path.exists() else dataset_path(str(name))


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def run_auditor_eval(args: argparse.Namespace) -> int:
    """Entry point of ``dmt-bench auditor-eval``."""
    from dmt_bench.auditor_eval.dataset import V2_STRATEGIES, load_items, select
    from dmt_bench.auditor_eval.metrics import summarize
    from dmt_bench.auditor_eval.report import RunInfo, write_reports
    from dmt_bench.auditor_eval.runner import ItemResult, load_checkpoint, run_items
    from dmt_proxy.audit.auditor import LLMAuditor
    from dmt_proxy.audit.stages import second_judges, staged_auditor
    from dmt_proxy.domains import DOMAINS
    from dmt_proxy.policy import AuditPolicy
    from dmt_proxy.upstream.factory import build_chat_model

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be at least 1")
    endpoint = resolve_endpoint(args, args.settings)
    path = dataset_file(args.dataset)
    items = select(load_items(path), split=args.split, limit=args.limit, seed=args.seed)
    dataset = path.stem
    chat = build_chat_model(args.settings)
    stage = getattr(args, "first_stage", None) or AuditPolicy().first_stage
    policy = AuditPolicy(tau=args.tau, calibration=args.calibration,
                         first_stage=stage if args.pipeline else "off")  # fmt: skip
    llm = LLMAuditor(chat, endpoint, options=auditor_options(args), prompt_version=args.prompt,
                     policy=policy)  # fmt: skip
    first_stage, trained = second_judges(policy)
    auditor = staged_auditor(llm, policy, first_stage=first_stage, trained=trained,
                             normalizer=args.normalizer)  # fmt: skip
    short = dataset.removeprefix("auditor_eval_")
    stem = f"auditor_eval_{short}_{_slug(args.model)}_{args.prompt}_{args.verdict}"
    if args.pipeline:
        stem += "_pipeline" if stage == "embedding" else f"_{stage}"
    if args.split != "all":
        stem += f"_{args.split}"
    if args.limit:
        stem += f"_n{args.limit}"
    args.out.mkdir(parents=True, exist_ok=True)
    checkpoint = args.out / f"{stem}.partial.jsonl"
    print(f"auditor-eval: {len(items)} items of {dataset}, auditor {llm.label}"
          f"{' + first stage' if args.pipeline else ''}, concurrency {args.concurrency}; "
          f"checkpoint {checkpoint}", file=sys.stderr)  # fmt: skip
    resumed = len(set(load_checkpoint(checkpoint)) & {i.id for i in items})
    started_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    t0 = time.perf_counter()

    async def run() -> list[ItemResult]:
        try:
            return await run_items(auditor, items, concurrency=args.concurrency, tau=args.tau,
                                   checkpoint=checkpoint)  # fmt: skip
        finally:
            await chat.aclose()

    results = asyncio.run(run())
    wall = time.perf_counter() - t0
    summary = summarize(
        [r.prediction(policy) for r in results], args.tau, domains=DOMAINS,
        strategies=V2_STRATEGIES,
    )  # fmt: skip
    info = RunInfo(
        model=args.model, litellm_model=endpoint.model, api_base=endpoint.api_base,
        prompt_version=args.prompt, dataset=dataset, split=args.split, limit=args.limit,
        structured_output=args.structured_output, concurrency=args.concurrency,
        started_at=started_at, wall_s=wall, verdict=llm.verdict_path, auditor=llm.label,
        pipeline=args.pipeline, command=" ".join(["dmt-bench", *sys.argv[1:]]),
        resumed=resumed,
    )  # fmt: skip
    json_path, md_path = write_reports(args.out, stem, info, summary, results)
    checkpoint.unlink(missing_ok=True)
    o = summary.overall
    print(
        f"precision {o.precision.value:.2f} recall {o.recall.value:.2f} F1 {o.f1.value:.2f} "
        f"failure rate {summary.failure_rate.value:.2f}; wrote {md_path} and {json_path}",
        file=sys.stderr,
    )
    return 0


def register(subparsers: Any) -> None:
    """Add ``auditor-eval`` and ``first-stage-eval`` to ``dmt-bench``."""
    from dmt_proxy.audit.logprob import CALIBRATION_VERSION
    from dmt_proxy.audit.normalize import NORMALIZER_VERSION

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
    p.add_argument("--prompt", default="auditor_v3", help="auditor prompt version (default v3)")
    p.add_argument(
        "--dataset", help="shipped set name (auditor_eval_v1, auditor_eval_v2) or a JSONL path"
    )
    p.add_argument(
        "--verdict",
        choices=("auto", "logprob", "json"),
        default="auto",
        help="verdict path (default auto: log-probs where the server returns them)",
    )
    p.add_argument(
        "--no-grammar",
        dest="grammar",
        action="store_false",
        help="do not send llama.cpp's grammar field (hosted providers)",
    )
    p.add_argument(
        "--no-rationale",
        dest="rationale",
        action="store_false",
        help="log-prob path: skip the rationale turn of tagged memories",
    )
    p.add_argument(
        "--kind-question",
        action="store_true",
        help="ask the prompt's kind question of every likely bias (to fit the +kind fusion)",
    )
    p.add_argument(
        "--no-calibration",
        dest="calibrate",
        action="store_false",
        help="use P(yes) as it is, without the shipped calibration",
    )
    p.add_argument(
        "--calibration",
        default=CALIBRATION_VERSION,
        help=f"calibration version or .json file (default {CALIBRATION_VERSION})",
    )
    p.add_argument(
        "--normalizer",
        default=NORMALIZER_VERSION,
        help=f"normaliser version (default {NORMALIZER_VERSION}; normalize_v2 before it)",
    )
    p.add_argument(
        "--pipeline",
        action="store_true",
        help="the full pipeline: normalisation, first stage (two judges), LLM",
    )
    p.add_argument(
        "--first-stage", choices=("embedding", "judge_v2"), default=None,
        help="with --pipeline: the judge beside the LLM (default: the default policy's)",
    )  # fmt: skip
    p.add_argument(
        "--structured-output", choices=("json_schema", "json_object", "none"), default="json_schema"
    )
    p.add_argument("--timeout", type=float, default=180.0, help="seconds per auditor call")
    p.add_argument("--max-tokens", type=int, default=400)
    p.add_argument("--seed", type=int, default=0, help="seed of the stratified subset")
    p.set_defaults(func=run_auditor_eval)

    from dmt_bench.auditor_eval.first_stage_eval import register_first_stage

    register_first_stage(subparsers)
