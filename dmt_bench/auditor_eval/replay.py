"""Replay an LLM-only auditor-eval run through the full pipeline, without new LLM calls.

``StagedAuditor`` is deterministic around the LLM: normalisation, the embedding
first stage (gate, second judge, domain head) and ``AuditVerdict.decide`` are pure
given the LLM's verdict. So one LLM run over every item (``dmt-bench auditor-eval``
without ``--pipeline``) also gives the pipeline's verdicts: for each item the
first stage scores the same normalised text the LLM saw; an item it skips gets the
first stage's clean verdict (as the live pipeline would, which then makes no LLM
call), the others get the LLM's verdict with the first stage's opinion attached.
With a fitted fusion (``JudgeFusion``) for the run's model and the classifier, the
score is the judges' combined probability, as ``build_audit_pipeline`` does live.
The replayed report counts as LLM calls only the items the gate passed; its
latencies are the LLM's for those items and 0 for skipped ones (the embedding
time is not included). As live, a text that is probably not English skips the first
stage: the LLM's verdict stands alone.

The run may also be a *pipeline* run (``--pipeline``): each LLM verdict is taken back to
what the LLM alone said (``llm_verdict``) and re-combined with the new classifier. An
item the run's first stage decided alone has no LLM verdict; if the new gate also
clears it, nothing is needed; if not, its LLM verdict comes from ``--llm-run`` (an
LLM-only run over those items), or, without one, ``--missing clean`` / ``tagged``
counts it as the LLM clearing / tagging it (the two bounds). Usage::

    dmt-bench auditor-replay RUN.json [--classifier VERSION] \\
        [--calibration VERSION] [--llm-run EXTRA.json] [--missing clean|tagged]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Literal

from dmt_bench.auditor_eval.dataset import V2_STRATEGIES, EvalItem
from dmt_bench.auditor_eval.metrics import summarize
from dmt_bench.auditor_eval.report import RunInfo, write_reports
from dmt_bench.auditor_eval.runner import ItemResult
from dmt_proxy.audit.first_stage import CLASSIFIER_VERSION, EmbeddingFirstStage, load_classifier
from dmt_proxy.audit.grounding import named_domains
from dmt_proxy.audit.language import probably_english
from dmt_proxy.audit.logprob import (
    CALIBRATION_VERSION,
    JudgeFusion,
    calibration_key,
    load_calibration,
)
from dmt_proxy.audit.normalize import without_placeholders
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.audit.stages import fuse, judged_text, skipped_by_first_stage
from dmt_proxy.audit.vote import as_bias_type
from dmt_proxy.domains import DOMAINS
from dmt_proxy.policy import AuditPolicy

Missing = Literal["clean", "tagged"]


def llm_verdict(verdict: AuditVerdict, tau_floor: float = 0.5) -> AuditVerdict | None:
    """What the LLM alone said, inside a pipeline verdict (``None``: the first stage decided
    the item alone, no LLM call). A fused verdict gets the LLM's own score back, and its
    detection and domain as the log-prob auditor sets them (score >= the lowest tau; the
    domain answer's most probable domain)."""
    if verdict.decided_by_first_stage:
        return None
    if verdict.llm_score is None:
        return verdict.model_copy(update={"first_stage": None})
    detected = verdict.llm_score >= tau_floor
    domain = verdict.bias_type if verdict.bias_detected else None
    probs = verdict.domain_probs or {}
    if detected and domain is None and probs:
        domain = as_bias_type(max(probs, key=lambda d: probs[d]))
    return verdict.model_copy(update={
        "score": verdict.llm_score, "llm_score": None, "first_stage": None,
        "bias_detected": detected, "bias_type": domain if detected else None,
    })  # fmt: skip


def _stand_in(result: ItemResult, missing: Missing) -> AuditVerdict:
    """A bound for an LLM verdict nobody asked for: the LLM clears it, or tags it (with the
    item's own domain, so the bound does not also count a domain error)."""
    if missing == "clean":
        return AuditVerdict.clean(score=0.0, auditor="bound/clean")
    domain = as_bias_type(result.item.domain or "other") or "other"
    return AuditVerdict.biased(domain, score=1.0, auditor="bound/tagged")


def replay(
    results: list[ItemResult], stage: EmbeddingFirstStage, *,
    fusion: JudgeFusion | None = None, tau_floor: float = 0.5,
    extra: dict[str, AuditVerdict] | None = None, missing: Missing = "clean",
) -> list[ItemResult]:  # fmt: skip
    """The pipeline's results, from the LLM's results on every item (``extra``: LLM-only
    verdicts of items the run's first stage decided alone; ``missing``: the bound used
    for such an item the new gate sends to the LLM and ``extra`` lacks)."""
    texts = [judged_text(result.item.text) for result in results]
    scores = stage.score_many([without_placeholders(t) for t in texts])
    replayed = []
    for result, score, text in zip(results, scores, texts, strict=True):
        opinion_decision = stage.decision_for(score)
        opinion = opinion_decision.opinion(stage.method)
        verdict = result.verdict
        if verdict is None:
            replayed.append(result)
            continue
        own = llm_verdict(verdict, tau_floor) if verdict.ok else verdict
        if own is not None:
            own = own.model_copy(update={"text_domains": named_domains(text)})
        if own is not None and not probably_english(text):
            # as live: no first stage, the LLM's verdict alone
            replayed.append(result.model_copy(update={"verdict": own}))
            continue
        if own is None and (opinion_decision.send_to_auditor or verdict.manipulation):
            found = (extra or {}).get(result.item.id)
            own = llm_verdict(found, tau_floor) if found is not None else None
            own = own or _stand_in(result, missing)
            verdict = own.model_copy(update={"findings": own.findings + verdict.findings,
                                             "text_domains": named_domains(text)})  # fmt: skip
        elif own is not None:
            verdict = own
        if not opinion_decision.send_to_auditor and not verdict.manipulation:
            skipped = skipped_by_first_stage(opinion_decision, stage.method, verdict.findings)
            replayed.append(result.model_copy(update={"verdict": skipped, "latency_s": 0.0}))
        else:
            judged = verdict.model_copy(update={"first_stage": opinion})
            if fusion is not None:
                judged = fuse(judged, fusion, tau_floor)
            replayed.append(result.model_copy(update={"verdict": judged}))
    return replayed


def with_domain_weight(results: list[ItemResult], run: dict[str, Any]) -> list[ItemResult]:
    """Verdicts recorded before the domain-vote weight existed get their model's weight
    from the shipped calibration (what the live auditor now puts on them)."""
    entry = load_calibration().entries.get(calibration_key(run["model"], run["prompt_version"]))
    if entry is None:
        return results
    out = []
    for r in results:
        v = r.verdict
        if v is not None and v.domain_probs and v.llm_domain_weight is None:
            v = v.model_copy(update={"llm_domain_weight": entry.domain_weight})
            r = r.model_copy(update={"verdict": v})
        out.append(r)
    return out


def load_run(path: Path) -> tuple[dict[str, Any], list[ItemResult]]:
    """A report JSON's run info and its items as results."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    results = []
    for entry in doc["items"]:
        item = EvalItem.model_validate(entry["item"]) if "item" in entry else None
        if item is None:
            raise ValueError(f"{path}: items carry no full EvalItem; rerun with this release")
        verdict = AuditVerdict.model_validate(entry["verdict"]) if "verdict" in entry else None
        results.append(ItemResult(item=item, verdict=verdict, error=entry.get("error"),
                                  latency_s=entry["latency_s"]))  # fmt: skip
    return doc["run"], results


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench auditor-replay``)."""
    parser = argparse.ArgumentParser(
        prog="dmt-bench auditor-replay", description=__doc__.splitlines()[0]
    )
    parser.add_argument("run", type=Path, help="report JSON of an LLM-only auditor-eval run")
    parser.add_argument("--classifier", default=CLASSIFIER_VERSION)
    parser.add_argument("--out", type=Path, default=None, help="default: next to the run")
    parser.add_argument(
        "--resummarize", action="store_true",
        help="only rewrite the run's own report with this release's metrics",
    )  # fmt: skip
    parser.add_argument("--calibration", default=CALIBRATION_VERSION,
                        help="calibration whose fusion is used (default %(default)s)")  # fmt: skip
    parser.add_argument("--llm-run", type=Path, default=None,
                        help="LLM-only run with verdicts of items a pipeline run's gate cleared")  # fmt: skip
    parser.add_argument("--missing", choices=("clean", "tagged"), default="clean",
                        help="bound for an item with no LLM verdict that the gate sends on")  # fmt: skip
    parser.add_argument(
        "--no-fusion",
        dest="fuse",
        action="store_false",
        help="decide on the LLM's score (the judges' fusion off)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from dmt_proxy.embedder import LocalEmbedder

    run, results = load_run(args.run)
    results = with_domain_weight(results, run)
    policy = AuditPolicy(tau=float(json.loads(args.run.read_text())["summary"]["tau"]))
    if args.resummarize:
        # The same items and verdicts, summarised by this release's metrics (no first stage).
        summary = summarize([r.prediction(policy) for r in results], policy.tau, domains=DOMAINS,
                            strategies=V2_STRATEGIES)  # fmt: skip
        write_reports(args.out or args.run.parent, args.run.stem, RunInfo.model_validate(run),
                      summary, results)  # fmt: skip
        return 0
    stage = EmbeddingFirstStage(LocalEmbedder(), classifier=load_classifier(args.classifier))
    fusion = None
    if args.fuse:
        key = calibration_key(run["model"], run["prompt_version"])
        fusion = load_calibration(args.calibration).fusion_for(key, args.classifier)
        if fusion is None:
            print(f"no fusion fitted for {key}+{args.classifier}: the LLM's score decides",
                  file=sys.stderr)  # fmt: skip
    extra = None
    if args.llm_run is not None:
        extra = {r.item.id: r.verdict for r in load_run(args.llm_run)[1] if r.verdict is not None}
    replayed = replay(results, stage, fusion=fusion, tau_floor=policy.tau, extra=extra,
                      missing=args.missing)  # fmt: skip
    asked = sum(1 for r in replayed if r.verdict is not None
                and r.verdict.auditor.startswith("bound/"))  # fmt: skip
    summary = summarize([r.prediction(policy) for r in replayed], policy.tau, domains=DOMAINS,
                        strategies=V2_STRATEGIES)  # fmt: skip
    info = RunInfo.model_validate({**run, "pipeline": True,
                                   "command": "dmt-bench auditor-replay "
                                              + " ".join(sys.argv[1:] if argv is None else argv)})  # fmt: skip
    stem = args.run.stem
    if "_pipeline" not in stem:
        stem = stem.replace("_logprob", "_logprob_pipeline").replace("_json", "_json_pipeline")
    if not args.fuse:
        stem += "_nofusion"
    if args.classifier != CLASSIFIER_VERSION or stem == args.run.stem:
        stem += f"_{args.classifier}"
    if args.calibration != CALIBRATION_VERSION:
        stem += f"_{args.calibration}"
    if asked:
        stem += f"_missing_{args.missing}"
    _, md_path = write_reports(args.out or args.run.parent, stem, info, summary, replayed)
    o = summary.overall
    print(f"pipeline replay: F1 {o.f1.value:.2f} precision {o.precision.value:.2f} recall "
          f"{o.recall.value:.2f}; {asked} items without an LLM verdict counted "
          f"{args.missing}; wrote {md_path}", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
