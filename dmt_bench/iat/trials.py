"""Trial plans: everything random about one trial, drawn from a seed recorded with it.

One plan serves both tests: the implicit trial uses its candidates and attribute
words, the explicit trial the same template variant and attribute words with the
group words, so the explicit answer is a self-reflection on the very association
the implicit trial probed (paper §3.2).

The draw order below is part of ``PLAN_VERSION``; changing it changes every trial.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from dmt_bench.iat.stimuli import SAMPLE_PER_TARGET, Category, CategoryName
from dmt_bench.iat.templates import VARIANTS, TemplateVariant

PLAN_VERSION = "plan_v1"

LikertOption = Literal["strongly disagree", "disagree", "neutral", "agree", "strongly agree"]
LIKERT_OPTIONS: tuple[LikertOption, ...] = (
    "strongly disagree",
    "disagree",
    "neutral",
    "agree",
    "strongly agree",
)
STEREOTYPICAL_LIKERT: frozenset[LikertOption] = frozenset({"agree", "strongly agree"})


class TrialPlan(BaseModel):
    """The random draws of one trial (shared by its implicit and explicit test)."""

    model_config = ConfigDict(frozen=True)

    category: CategoryName
    template: int
    swapped: bool
    run: int
    seed: int
    stimuli_a: tuple[str, ...]
    """The stimuli sampled from ``target_a`` (stereotypically paired with ``attr_x``)."""
    stimuli_b: tuple[str, ...]
    candidates: tuple[str, ...]
    """``stimuli_a + stimuli_b`` shuffled: the order shown to the model."""
    attr_x: str
    attr_y: str
    group_a: str
    group_b: str
    likert_order: tuple[LikertOption, ...]
    """The five Likert options in the order shown to the model."""

    @property
    def variant(self) -> TemplateVariant:
        """The template variant of this trial."""
        return TemplateVariant(self.template, self.swapped)

    @property
    def key(self) -> str:
        """Stable id, e.g. ``race/t3s/r07``: equal keys across result files mean equal prompts."""
        return f"{self.category}/{self.variant.label}/r{self.run:02d}"


def trial_seed(base_seed: int, category: str, variant: TemplateVariant, run: int) -> int:
    """Seed of one trial: a hash of its coordinates, so trials do not depend on each other."""
    text = f"{base_seed}|{category}|{variant.template}|{int(variant.swapped)}|{run}"
    digest = hashlib.sha256(text.encode()).digest()
    # 31 bits: also usable as the request ``seed`` by servers that reject larger ints
    return int.from_bytes(digest[:4], "big") % (2**31 - 1)


def make_plan(category: Category, variant: TemplateVariant, run: int, base_seed: int) -> TrialPlan:
    """Draw one trial: 5 stimuli per target, one word per attribute, shuffles (paper §3.1)."""
    seed = trial_seed(base_seed, category.name, variant, run)
    rng = random.Random(seed)
    stimuli_a = tuple(rng.sample(category.target_a.stimuli, SAMPLE_PER_TARGET))
    stimuli_b = tuple(rng.sample(category.target_b.stimuli, SAMPLE_PER_TARGET))
    attr_x = rng.choice(category.attribute_x.words)
    attr_y = rng.choice(category.attribute_y.words)
    candidates = [*stimuli_a, *stimuli_b]
    rng.shuffle(candidates)
    group_a = rng.choice(category.target_a.group_words)
    group_b = rng.choice(category.target_b.group_words)
    likert = list(LIKERT_OPTIONS)
    rng.shuffle(likert)
    return TrialPlan(
        category=category.name,
        template=variant.template,
        swapped=variant.swapped,
        run=run,
        seed=seed,
        stimuli_a=stimuli_a,
        stimuli_b=stimuli_b,
        candidates=tuple(candidates),
        attr_x=attr_x,
        attr_y=attr_y,
        group_a=group_a,
        group_b=group_b,
        likert_order=tuple(likert),
    )


def make_plans(
    categories: Sequence[Category],
    runs: int,
    base_seed: int,
    variants: Sequence[TemplateVariant] = VARIANTS,
) -> list[TrialPlan]:
    """All plans: ``runs`` per template variant per category (paper: 20 x 10 = 200)."""
    return [
        make_plan(category, variant, run, base_seed)
        for category in categories
        for variant in variants
        for run in range(runs)
    ]
