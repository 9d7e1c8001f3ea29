"""The adversarial memory set against a real auditor model: how detection changes.

Each adversarial text is its base text (the "twin") plus an injection. The runner
audits every base and every adversarial item once with the policy's LLM auditor
(``LLMAuditor``, the production code) and reports, per attack kind:

* evasion: biased twins that were flagged, whose adversarial version was not;
* forgery: the neutral twin not flagged, its adversarial version flagged;
* failures: no valid verdict after the repair retry (status ``failed``, never clean).

Run (about 25 auditor calls; minutes on a 2-core CPU)::

    python -m tests.reliability.adversarial_auditor \\
        --base-url http://127.0.0.1:8092/v1 --model qwen2.5-1.5b \\
        --out benchmarks/results/adversarial_memories
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_proxy.audit.auditor import AuditorUnavailable, LLMAuditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.policy import AuditPolicy, load_policy
from dmt_proxy.resources import data_dir
from dmt_proxy.upstream.base import ModelEndpoint
from dmt_proxy.upstream.openai_compat import OpenAICompatChatModel

SET_VERSION = "adversarial_memories_v1"


class BaseText(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    biased: bool
    bias_type: str | None
    text: str


class AdversarialItem(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    base: str
    attack: str
    text: str
    note: str = ""
    """How to read this item's result (not part of the text sent to the auditor)."""


class AdversarialSet(BaseModel):
    """``dmt_proxy/data/adversarial/<version>.json``."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: str
    description: str
    attacks: dict[str, str]
    guessed_nonce: str
    bases: list[BaseText]
    items: list[AdversarialItem]

    def base(self, base_id: str) -> BaseText:
        return next(b for b in self.bases if b.id == base_id)


def load_set(version: str = SET_VERSION) -> AdversarialSet:
    """Load and validate a versioned adversarial memory set."""
    path = data_dir("adversarial") / f"{version}.json"
    return AdversarialSet.model_validate_json(path.read_text(encoding="utf-8"))


class Judged(BaseModel):
    """One audited text."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    id: str
    flagged: bool
    failed: bool
    bias_type: str | None
    score: float
    latency_s: float
    note: str = ""


def rate(k: int, n: int) -> float:
    """k / n; NaN when n == 0 (no items: undefined, not zero)."""
    return k / n if n else math.nan


def flagged(verdict: AuditVerdict, policy: AuditPolicy) -> bool:
    """The policy decides tagged (or quarantined / dropped): the memory carries a tag."""
    return verdict.decide(policy).outcome == "tagged"


def summarize(data: AdversarialSet, judged: dict[str, Judged]) -> dict[str, Any]:
    """Per attack kind and overall: evasions, forgeries, failures (pure; formulas inline).

    evasion rate = #(biased twin flagged and its adversarial item not flagged)
                   / #(adversarial items whose biased twin was flagged);
    forgery rate = #(neutral twin not flagged and adversarial item flagged)
                   / #(adversarial items whose neutral twin was not flagged).
    """
    rows: dict[str, dict[str, int]] = {}
    for item in data.items:
        base = data.base(item.base)
        twin, adv = judged[base.id], judged[item.id]
        for key in (item.attack, "all"):
            row = rows.setdefault(key, {"n": 0, "evasion_n": 0, "evaded": 0, "forgery_n": 0,
                                        "forged": 0, "failed": 0})  # fmt: skip
            row["n"] += 1
            row["failed"] += int(adv.failed)
            if base.biased and twin.flagged:
                row["evasion_n"] += 1
                row["evaded"] += int(not adv.flagged)
            if not base.biased and not twin.flagged:
                row["forgery_n"] += 1
                row["forged"] += int(adv.flagged)
    biased = [b for b in data.bases if b.biased]
    adv_biased = [i for i in data.items if data.base(i.base).biased]
    by_attack = {
        k: {**v, "evasion_rate": rate(v["evaded"], v["evasion_n"]),
            "forgery_rate": rate(v["forged"], v["forgery_n"])}
        for k, v in rows.items()
    }  # fmt: skip
    return {
        "by_attack": by_attack,
        "recall_twins": rate(sum(judged[b.id].flagged for b in biased), len(biased)),
        "recall_adversarial": rate(sum(judged[i.id].flagged for i in adv_biased), len(adv_biased)),
    }


async def judge_all(
    auditor: LLMAuditor, policy: AuditPolicy, texts: Sequence[tuple[str, str]], concurrency: int
) -> dict[str, Judged]:
    sem = asyncio.Semaphore(concurrency)
    out: dict[str, Judged] = {}

    async def one(key: str, text: str) -> None:
        async with sem:
            started = time.perf_counter()
            try:
                verdict = await auditor.audit(AuditCandidate(text=text, candidate_id=key))
            except AuditorUnavailable as exc:
                out[key] = Judged(id=key, flagged=False, failed=True, bias_type=None, score=0.0,
                                  latency_s=time.perf_counter() - started, note=exc.message)  # fmt: skip
            else:
                out[key] = Judged(id=key, flagged=flagged(verdict, policy),
                                  failed=verdict.status.value == "failed", bias_type=verdict.bias_type,
                                  score=verdict.score, latency_s=verdict.latency_s,
                                  note=verdict.failure_reason or "")  # fmt: skip
            print(f"[{len(out)}/{len(texts)}] {key}: flagged={out[key].flagged} "
                  f"failed={out[key].failed} {out[key].latency_s:.1f}s", file=sys.stderr)  # fmt: skip

    await asyncio.gather(*(one(k, t) for k, t in texts))
    return out


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x:.2f}"


def render_markdown(meta: dict[str, Any], data: AdversarialSet, judged: dict[str, Judged],
                    summary: dict[str, Any]) -> str:  # fmt: skip
    lines = [
        f"# Adversarial memories against the auditor ({meta['model']}, {meta['prompt']})",
        "",
        f"Set `{data.version}`: {len(data.items)} adversarial texts on {len(data.bases)} base "
        f"texts (their non-adversarial twins); tau = {meta['tau']}; {meta['calls']} audits, "
        f"concurrency {meta['concurrency']}, wall {meta['wall_s']:.0f} s, run {meta['run_at']}."
        + (f" {meta['conditions']}" if meta.get("conditions") else ""),
        "",
        "Rerun: `" + meta["command"] + "`",
        "",
        f"Recall on the biased twins: {_pct(summary['recall_twins'])}; on their adversarial "
        f"versions: {_pct(summary['recall_adversarial'])}.",
        "",
        "| attack | n | evaded / flagged twins | evasion rate | forged / clean twins | forgery rate | failed |",
        "|---|---|---|---|---|---|---|",
    ]
    for attack, row in sorted(summary["by_attack"].items(), key=lambda kv: kv[0] == "all"):
        lines.append(
            f"| {'**all**' if attack == 'all' else attack} | {row['n']} | {row['evaded']} / "
            f"{row['evasion_n']} | {_pct(row['evasion_rate'])} | {row['forged']} / "
            f"{row['forgery_n']} | {_pct(row['forgery_rate'])} | {row['failed']} |"
        )
    lines += ["", "## Per text", "", "| id | base | attack | flagged | type | score | failed | note |",
              "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for base in data.bases:
        j = judged[base.id]
        lines.append(f"| {base.id} (twin) | {base.id} | none | {j.flagged} | {j.bias_type} | "
                     f"{j.score:.2f} | {j.failed} | |")  # fmt: skip
    for item in data.items:
        j = judged[item.id]
        lines.append(f"| {item.id} | {item.base} | {item.attack} | {j.flagged} | {j.bias_type} | "
                     f"{j.score:.2f} | {j.failed} | {item.note} |")  # fmt: skip
    lines += [
        "",
        "Forged tags in the rendered memory block are measured separately and are 0 by "
        "construction (tests/unit/test_rel_adversarial.py): the numbers above are about the "
        "auditor model's judgement only.",
        "",
    ]
    return "\n".join(lines)


def rerender(out: Path) -> None:
    """Rewrite ``<out>.md`` from ``<out>.json`` (after a change to the report, no model calls)."""
    result = json.loads(out.with_suffix(".json").read_text())
    data = load_set(result["meta"]["set"])
    judged = {k: Judged.model_validate(v) for k, v in result["judged"].items()}
    summary = summarize(data, judged)
    out.with_suffix(".md").write_text(render_markdown(result["meta"], data, judged, summary))


async def run(args: argparse.Namespace) -> dict[str, Any]:
    if args.rerender:
        rerender(Path(args.out))
        return {}
    policy = load_policy(args.policy)
    prompt = args.prompt or policy.audit.auditor_prompt
    data = load_set(args.set)
    call = ModelEndpoint(name=f"local/{args.model}", model=f"openai/{args.model}",
                         api_base=args.base_url, api_key="unused", timeout_s=args.timeout)  # fmt: skip
    chat = OpenAICompatChatModel()
    auditor = LLMAuditor(chat, call, prompt_version=prompt, policy=policy.audit)
    if args.limit:
        keep = data.items[: args.limit]
        needed = {i.base for i in keep}
        data = data.model_copy(update={"items": keep,
                                       "bases": [b for b in data.bases if b.id in needed]})  # fmt: skip
    texts = [(b.id, b.text) for b in data.bases] + [(i.id, i.text) for i in data.items]
    started = time.perf_counter()
    try:
        judged = await judge_all(auditor, policy.audit, texts, args.concurrency)
    finally:
        await chat.aclose()
    summary = summarize(data, judged)
    meta = {
        "model": args.model, "prompt": prompt, "tau": policy.audit.tau, "calls": len(texts),
        "concurrency": args.concurrency, "wall_s": time.perf_counter() - started,
        "run_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), "set": data.version,
        "command": "python -m tests.reliability.adversarial_auditor --base-url "
                   f"{args.base_url} --model {args.model} --out {args.out}",
        "conditions": args.conditions,
    }  # fmt: skip
    result = {"meta": meta, "summary": summary,
              "judged": {k: v.model_dump() for k, v in judged.items()}}  # fmt: skip
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
        out.with_suffix(".md").write_text(render_markdown(meta, data, judged, summary))
        print(f"wrote {out.with_suffix('.md')} and .json", file=sys.stderr)
    return result


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", default="http://127.0.0.1:8092/v1")
    parser.add_argument("--model", default="qwen2.5-1.5b")
    parser.add_argument("--policy", type=Path, default=None, help="policy YAML (tau, prompt)")
    parser.add_argument("--prompt", default=None, help="auditor prompt version (default: policy's)")
    parser.add_argument("--set", default=SET_VERSION)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--limit", type=int, default=0, help="only the first N adversarial items")
    parser.add_argument("--out", default="", help="write <out>.md and <out>.json")
    parser.add_argument("--conditions", default="", help="how the machine was loaded (report)")
    parser.add_argument("--rerender", action="store_true",
                        help="only rewrite <out>.md from an existing <out>.json")  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    asyncio.run(run(build_parser().parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
