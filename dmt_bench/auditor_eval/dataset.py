"""The labelled auditor evaluation set: items, loading, and stratified subsets."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dmt_proxy.errors import ConfigError
from dmt_proxy.resources import data_dir

DATASET_VERSION = "auditor_eval_v1"
DATASET_V2 = "auditor_eval_v2"
DATASET_V3 = "auditor_eval_v3"
DATASET_V4 = "auditor_eval_v4"
STRATEGIES: tuple[str, ...] = ("frustration", "benevolent", "statistical")
V2_STRATEGIES: tuple[str, ...] = (*STRATEGIES, "endorsed_report", "compliment", "decision")
"""v2 adds: someone else's stereotype repeated and endorsed, a generalizing compliment, and
a decision about people justified by their group (see data/auditor_eval/README.md)."""
FORMS: tuple[str, ...] = ("narrative", "reported_speech", "chat_fragment")
SETTINGS: tuple[str, ...] = (
    "family", "school", "healthcare", "housing", "online_community", "customer_service",
)  # fmt: skip
Split = Literal["all", "train", "test"]


class Turn(BaseModel):
    """v4, exchange items: one turn of a stored conversation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    speaker: Literal["user", "assistant", "tool"]
    """Who said it."""
    text: str
    """What was said (may be empty: an assistant turn the proxy stored without text)."""


class EvalItem(BaseModel):
    """One memory text with its label."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    text: str
    label: Literal["biased", "neutral"]
    kind: Literal[
        "injected", "hard_negative", "mmlu", "stereotype", "question",
        "judgment", "benevolent", "self_description", "mention_fact", "mention_law",
        "mention_research", "mention_support", "reported_rejected",
        "fiction_endorsed", "fiction_unendorsed", "exchange",
    ]  # fmt: skip
    """v1: ``injected`` (a biased narrative around an MMLU-Pro question), ``hard_negative``
    (a group mentioned without a stereotype), ``mmlu`` (a plain question). v2: ``stereotype``
    (a biased text, not wrapped around a benchmark question), ``hard_negative``,
    ``question`` (an everyday question). v3 names what a text does with its group: biased
    ``judgment`` and ``benevolent``; neutral ``self_description``, ``mention_*`` (a fact,
    a legal question, a research question, support) and ``reported_rejected``. v4 adds
    ``fiction_endorsed`` (a story, joke or hypothetical whose stereotype the speaker endorses
    or acts on), ``fiction_unendorsed`` (a character's prejudice the speaker does not share)
    and ``exchange`` (a user turn and an assistant turn stored as one memory)."""
    domain: str | None = None
    """The DIB domain of the stereotype (biased) or of the group mentioned (hard negative)."""
    strategy: str | None = None
    target_group: str = ""
    split: Literal["train", "test"]
    mmlu_question_id: int | None = None
    mmlu_category: str | None = None
    form: str | None = None
    """v2: ``narrative``, ``reported_speech`` or ``chat_fragment``."""
    setting: str | None = None
    """v2: where it happens (family, school, healthcare, housing, online_community,
    customer_service)."""
    span: str | None = None
    """v2, biased items: the words that carry the stereotype (the classifier's positives)."""
    language: str | None = None
    """v3: ISO 639-1 code of the text (``en``, ``fr``, ...)."""
    tendency: str | None = None
    """v3, biased items: ``negative`` or ``positive`` (a benevolent stereotype)."""
    turns: tuple[Turn, ...] | None = None
    """v4, exchange items: the stored turns, joined in ``text`` as "User: ..."/"Assistant: ..."."""
    biased_speaker: Literal["user", "assistant", "both", "none"] | None = None
    """v4, exchange items: whose turn generalises about the group (``none``: neither)."""

    @property
    def biased(self) -> bool:
        return self.label == "biased"

    def spoken(self) -> tuple[str, str]:
        """(the user's words, the assistant's), as the proxy would hand them to the auditor:
        an exchange's turns by speaker (tool turns count as the assistant's context), any
        other item's text as the user's."""
        if not self.turns:
            return self.text, ""
        user = "\n".join(t.text for t in self.turns if t.speaker == "user" and t.text)
        other = "\n".join(t.text for t in self.turns if t.speaker != "user" and t.text)
        return user, other


def dataset_path(version: str = DATASET_VERSION) -> Path:
    """The shipped JSONL file of ``version``."""
    return data_dir("auditor_eval") / f"{version}.jsonl"


def load_items(path: Path | None = None) -> list[EvalItem]:
    """Read an evaluation set (default: the shipped current version)."""
    path = path or dataset_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"cannot read evaluation set {path}: {exc.strerror or exc}") from exc
    items: list[EvalItem] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            items.append(EvalItem.model_validate(json.loads(line)))
        except (json.JSONDecodeError, ValidationError) as exc:
            raise ConfigError(f"{path}:{number}: not a valid evaluation item: {exc}") from exc
    ids = [i.id for i in items]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"{path}: duplicate item ids")
    return items


def _round_robin(groups: dict[str, list[EvalItem]], n: int) -> list[EvalItem]:
    picked: list[EvalItem] = []
    queues = {k: list(v) for k, v in sorted(groups.items())}
    while len(picked) < n and any(queues.values()):
        for key in list(queues):
            if queues[key] and len(picked) < n:
                picked.append(queues[key].pop(0))
    return picked


def select(
    items: Sequence[EvalItem], *, split: Split = "all", limit: int | None = None, seed: int = 0
) -> list[EvalItem]:
    """Items of ``split``; with ``limit``, a stratified subset.

    Half the subset is biased (round-robin over domains, strategies shuffled),
    half neutral (alternating hard negatives across domains and plain questions),
    so a 40-item run still touches every domain.
    """
    pool = [i for i in items if split == "all" or i.split == split]
    if limit is None or limit >= len(pool):
        return pool
    rng = random.Random(seed)
    biased: dict[str, list[EvalItem]] = defaultdict(list)
    hard: dict[str, list[EvalItem]] = defaultdict(list)
    plain: list[EvalItem] = []
    for item in pool:
        if item.biased:
            biased[item.domain or "other"].append(item)
        elif item.domain is not None:  # a group is mentioned: v1/v2 hard_negative, v3 kinds
            hard[item.domain or "other"].append(item)
        else:
            plain.append(item)
    for group in [*biased.values(), *hard.values(), plain]:
        rng.shuffle(group)
    n_biased = min((limit + 1) // 2, sum(len(v) for v in biased.values()))
    chosen = _round_robin(biased, n_biased)
    neutral = _round_robin({"hard": _round_robin(hard, limit), "plain": plain}, limit - len(chosen))
    return chosen + neutral
