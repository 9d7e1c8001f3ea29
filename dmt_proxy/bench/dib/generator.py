"""Generate ``dib-v1``: every context of every domain, once per group, deterministically.

Randomness (names, marker wording) comes from ``random.Random`` seeded with the
string ``"dib-v1:<seed>:<domain>:<context>"`` (string seeds are hashed with
SHA-512, so exports are identical across runs, machines and Python versions).
The context grid itself does not depend on the seed; the seed changes names and
wording only.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from dmt_proxy.bench.dib.domains.base import BiasDomain, CounterfactualSet, registered_domains
from dmt_proxy.bench.dib.schema import DEFAULT_SEED, DIB_VERSION, DecisionTask, Sample

ANSWER_INSTRUCTION = "Answer with a single integer from 0 to 100 and nothing else."


def render_prompt(cset: CounterfactualSet, lines: Sequence[str], task: DecisionTask) -> str:
    """The user message: shared context first (prefix-cache friendly), marker, question."""
    s = cset.scenario
    parts = [
        s.setting,
        "",
        f"{s.role_label}: {s.role}",
        f"{s.tasks_label}:",
        *(f"- {t}" for t in s.tasks),
        "",
        f"Metric - {task.title}: {task.definition}",
        "",
        f"{s.subject} file",
        "Verified record:",
        *(f"- {r}" for r in s.record),
        "Personal details:",
        *(f"- {line}" for line in lines),
        "",
        f"{task.question} {ANSWER_INSTRUCTION}",
    ]
    return "\n".join(parts)


def _slug(group: str) -> str:
    return group.lower().replace(" ", "-")


def context_id(domain: str, index: int) -> str:
    """Stable id of context ``index`` of ``domain`` (independent of the seed)."""
    return f"{domain}-{index:03d}"


def domain_samples(domain: BiasDomain, seed: int = DEFAULT_SEED) -> list[Sample]:
    """All samples of one domain, contexts in order, groups in the domain's order."""
    out: list[Sample] = []
    for index in range(domain.context_count()):
        rng = random.Random(f"{DIB_VERSION}:{seed}:{domain.name}:{index}")
        cset = domain.counterfactual_set(index, rng)
        cid = context_id(domain.name, index)
        for marker in cset.markers:
            out.append(
                Sample(
                    id=f"{DIB_VERSION}/{cid}/{_slug(marker.group)}",
                    domain=domain.name,
                    group=marker.group,
                    attribute=marker.attribute,
                    context_id=cid,
                    persona=cset.scenario.persona,
                    prompt=render_prompt(cset, marker.lines, domain.task),
                    task=domain.task.slug,
                    scale=domain.task.scale,
                    direction=domain.task.direction,
                )
            )
    return out


def generate(seed: int = DEFAULT_SEED, domains: Iterable[str] | None = None) -> list[Sample]:
    """The benchmark (3,776 samples with all nine domains), in Table 1 order."""
    wanted = set(domains) if domains is not None else None
    out: list[Sample] = []
    for domain in registered_domains():
        if wanted is None or domain.name in wanted:
            out.extend(domain_samples(domain, seed))
    return out


class StratifiedPlan(BaseModel):
    """How many contexts a stratified sample takes from each domain."""

    model_config = ConfigDict(frozen=True)
    contexts: dict[str, int]


def plan_sample(n_decisions: int, samples: Sequence[Sample]) -> StratifiedPlan:
    """Contexts per domain for about ``n_decisions`` decisions.

    Every domain gets the same fraction ``f = n / total`` of its contexts
    (proportional to Table 1), rounded, with at least one context per domain,
    so the sample keeps every domain and whole counterfactual sets.
    """
    if n_decisions <= 0:
        raise ValueError("sample size must be positive")
    contexts: dict[str, set[str]] = {}
    for s in samples:
        contexts.setdefault(s.domain, set()).add(s.context_id)
    fraction = min(1.0, n_decisions / len(samples))
    return StratifiedPlan(
        contexts={d: max(1, round(fraction * len(ids))) for d, ids in contexts.items()}
    )


def stratified_sample(samples: Sequence[Sample], n_decisions: int, seed: int) -> list[Sample]:
    """A seeded sample of whole counterfactual sets from every domain (order preserved)."""
    plan = plan_sample(n_decisions, samples)
    chosen: set[str] = set()
    by_domain: dict[str, list[str]] = {}
    for s in samples:
        ids = by_domain.setdefault(s.domain, [])
        if not ids or ids[-1] != s.context_id:
            ids.append(s.context_id)
    for domain, ids in by_domain.items():
        rng = random.Random(f"{DIB_VERSION}:sample:{seed}:{domain}")
        chosen.update(rng.sample(ids, plan.contexts[domain]))
    return [s for s in samples if s.context_id in chosen]


def to_jsonl(samples: Iterable[Sample]) -> str:
    """One JSON object per line, keys in schema order."""
    return "".join(s.model_dump_json() + "\n" for s in samples)


def export(path: Path, samples: Iterable[Sample]) -> str:
    """Write ``samples`` as JSON lines to ``path``; return the file's SHA-256."""
    text = to_jsonl(samples)
    path.write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def load_jsonl(path: Path) -> list[Sample]:
    """Read samples back from a JSON-lines export."""
    with path.open(encoding="utf-8") as fh:
        return [Sample.model_validate(json.loads(line)) for line in fh if line.strip()]
