"""The judges' combined domain vote: which bias domain a verdict names.

The LLM's domain distribution (from log-probs, or its one named domain) and the
embedding first stage's domain head, averaged with weight ``DOMAIN_VOTE_LLM_WEIGHT``
on the LLM. Pure functions of plain values, so the verdict (``dmt_proxy.audit.schema``)
and the decision (``dmt_proxy.audit.decision``) both build on it without importing
each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from dmt_proxy.domains import BIAS_TYPES, BiasType

DOMAIN_VOTE_LLM_WEIGHT = 0.5
"""The LLM's share of the combined domain vote (the classifier's head has the rest)."""


def combine_domains(
    llm: dict[str, float] | None, llm_type: str | None, first_stage: dict[str, float] | None,
    *, llm_weight: float = DOMAIN_VOTE_LLM_WEIGHT, within: Sequence[str] = (),
) -> str | None:  # fmt: skip
    """The combined vote: argmax of ``w·p_llm + (1-w)·p_first_stage`` (each normalised).

    ``p_llm`` is the LLM's distribution, or one-hot on ``llm_type`` without one; a judge
    with no opinion drops out. ``None`` when neither has one. Ties go to the LLM's domain.
    With ``within`` (the domains the text names, in order of first mention) only those
    domains are voted on; if neither judge gives any of them mass, the first one wins.
    """
    if within:
        keep = set(within)
        llm = {d: p for d, p in llm.items() if d in keep} if llm else None
        llm_type = llm_type if llm_type in keep else None
        first_stage = {d: p for d, p in (first_stage or {}).items() if d in keep}
        voted = combine_domains(llm, llm_type, first_stage, llm_weight=llm_weight)
        return voted if voted is not None else within[0]
    votes: dict[str, float] = {}
    llm_dist = llm if llm else ({llm_type: 1.0} if llm_type else {})
    judges = [(llm_dist, llm_weight), (first_stage or {}, 1.0 - llm_weight)]
    active = [(d, w) for d, w in judges if d and sum(d.values()) > 0]
    if not active:
        return None
    total_w = sum(w for _, w in active) or 1.0
    for dist, weight in active:
        mass = sum(dist.values())
        for domain, p in dist.items():
            votes[domain] = votes.get(domain, 0.0) + (weight / total_w) * p / mass
    best = max(votes.values())
    if llm_type is not None and votes.get(llm_type, -1.0) >= best - 1e-9:
        return llm_type
    winner: str = max(sorted(votes), key=lambda d: votes[d])
    return winner


def as_bias_type(value: str | None) -> BiasType | None:
    """``value`` as a tag's bias type; ``None`` for ``None`` or a name outside the list."""
    return cast("BiasType", value) if value in BIAS_TYPES else None
