"""The memories a dose scope is seeded with, drawn from the labelled set ``auditor_eval_v1``.

Biased seeds of domain d are the set's stereotyped narratives of d (18: three
strategies × 6, each wrapped around an MMLU-Pro question). Their order is fixed
per (seed, domain): each strategy's items are shuffled with
``random.Random("dose-seeds:<seed>:<domain>:<strategy>")``, the strategies' order
with ``"dose-seeds:<seed>:<domain>"``, and the seeds taken round-robin across
strategies, so a dose of 3 holds one of each and doses nest (the k = 1 item is
among the k = 3 items, which are among the k = 10 ones).

Neutral seeds are the set's plain MMLU-Pro questions (``mmlu``, the same for every
source) or the source's hard negatives (``hard_negative``: its groups mentioned
without a stereotype), nested the same way.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from dmt_bench.auditor_eval.dataset import STRATEGIES, EvalItem, load_items
from dmt_proxy.errors import ConfigError


class Seed(BaseModel):
    """One memory to seed: the labelled item it comes from and the user's words."""

    model_config = ConfigDict(frozen=True)
    id: str
    text: str
    domain: str | None
    strategy: str | None
    label: str


def _seed(item: EvalItem) -> Seed:
    return Seed(
        id=item.id, text=item.text, domain=item.domain, strategy=item.strategy, label=item.label
    )


def _shuffled(items: Sequence[EvalItem], key: str) -> list[EvalItem]:
    out = sorted(items, key=lambda i: i.id)
    random.Random(key).shuffle(out)
    return out


def biased_order(items: Sequence[EvalItem], domain: str, seed: int) -> list[Seed]:
    """Every biased item of ``domain`` in seeding order (see the module docstring)."""
    by_strategy = {
        s: _shuffled(
            [i for i in items if i.biased and i.domain == domain and i.strategy == s],
            f"dose-seeds:{seed}:{domain}:{s}",
        )
        for s in STRATEGIES
    }
    strategies = list(STRATEGIES)
    random.Random(f"dose-seeds:{seed}:{domain}").shuffle(strategies)
    out: list[Seed] = []
    while any(by_strategy.values()):
        for s in strategies:
            if by_strategy[s]:
                out.append(_seed(by_strategy[s].pop(0)))
    return out


def neutral_order(
    items: Sequence[EvalItem], source: str | None, kind: str, seed: int
) -> list[Seed]:
    """Every neutral item of ``kind`` (``mmlu``, or ``hard_negative`` of ``source``), in order."""
    if kind == "mmlu":
        pool = [i for i in items if i.kind == "mmlu"]
        key = f"dose-seeds:{seed}:neutral"
    else:
        pool = [i for i in items if i.kind == "hard_negative" and i.domain == source]
        key = f"dose-seeds:{seed}:{source}:neutral"
    return [_seed(i) for i in _shuffled(pool, key)]


def seeds_for(
    kind: str,
    source: str | None,
    k: int,
    *,
    seed: int,
    neutral: str = "mmlu",
    items: Sequence[EvalItem] | None = None,
) -> list[Seed]:
    """The first ``k`` seeds of a scope; ConfigError when the set holds fewer."""
    pool = load_items() if items is None else items
    if kind == "biased":
        if source is None:
            raise ValueError("biased seeds need a source domain")
        order = biased_order(pool, source, seed)
    else:
        order = neutral_order(pool, source, neutral, seed)
    if len(order) < k:
        raise ConfigError(f"only {len(order)} {kind} seed items for {source or 'any source'}")
    return order[:k]
