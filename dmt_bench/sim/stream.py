"""The daily interaction stream: T MMLU-Pro questions, a fraction λ rewritten with bias.

The *plan* is pure and cheap: which question each turn asks, whether it is
injected and with which domain's bias. Three independent seeded generators keep
the pieces aligned across settings — questions (``sim-mmlu:<seed>``), injection
draws u_t (``sim-stream:<seed>:positions``; turn t is injected iff u_t < λ, so a
smaller λ injects a subset of a larger λ's turns) and domains
(``sim-stream:<seed>:domains``, drawn for every turn) — so single-source streams
of different domains share questions and injected turns and differ only in the bias.

The *stream* adds the generator's rewrites. It is generated once per spec and
cached as JSON lines (one turn per line, appended as generated, so an interrupted
generation continues where it stopped); every condition of a run reads the same
file, so differences between conditions come from the mitigation alone.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from dmt_bench.mmlu import LoadedSource, MmluQuestion, select_questions
from dmt_bench.sim.bias_list import load_bias_list
from dmt_bench.sim.config import SIM_VERSION, SimConfig
from dmt_bench.sim.injection import Attempt, BiasGenerator, Strategy
from dmt_proxy.domains import DOMAINS
from dmt_proxy.errors import ConfigError


class StreamSpec(BaseModel):
    """Everything a cached stream depends on; its digest names the cache."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    sim_version: str = SIM_VERSION
    source: str
    source_sha256: str
    seed: int
    turns: int
    rate: float
    mode: str
    domain: str | None
    generator: str
    prompt: str
    bias_list: str
    intact_policy: str
    max_attempts: int
    temperature: float
    max_tokens: int
    max_question_chars: int | None
    categories: list[str] | None

    def digest(self) -> str:
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def stream_spec(
    config: SimConfig, source: LoadedSource, *, single_domain: str | None = None
) -> StreamSpec:
    """The spec of ``config``'s stream (``single_domain`` overrides for heatmap rows)."""
    inj = config.injection
    return StreamSpec(
        source=source.source,
        source_sha256=source.sha256,
        seed=config.seed,
        turns=config.turns,
        rate=inj.rate,
        mode="single" if single_domain else inj.mode,
        domain=single_domain or inj.domain,
        generator=config.models.generator.model,
        prompt=inj.prompt,
        bias_list=inj.bias_list,
        intact_policy=inj.intact_policy,
        max_attempts=inj.max_attempts,
        temperature=inj.temperature,
        max_tokens=inj.max_tokens,
        max_question_chars=config.stream.max_question_chars,
        categories=config.stream.categories,
    )


class TurnPlan(BaseModel):
    """What turn t asks before any rewriting."""

    model_config = ConfigDict(frozen=True)
    t: int
    """1-based turn number."""
    question: MmluQuestion
    inject: bool
    domain: str | None


def build_plan(spec: StreamSpec, questions: Sequence[MmluQuestion]) -> list[TurnPlan]:
    """The deterministic plan of ``spec`` (see the module docstring)."""
    chosen = select_questions(
        questions,
        spec.turns,
        spec.seed,
        max_chars=spec.max_question_chars,
        categories=spec.categories,
    )
    positions = random.Random(f"sim-stream:{spec.seed}:positions")
    domains = random.Random(f"sim-stream:{spec.seed}:domains")
    plan: list[TurnPlan] = []
    for t, question in enumerate(chosen, 1):
        inject = positions.random() < spec.rate
        drawn = domains.choice(DOMAINS)
        domain = (spec.domain if spec.mode == "single" else drawn) if inject else None
        plan.append(TurnPlan(t=t, question=question, inject=inject, domain=domain))
    return plan


class StreamTurn(BaseModel):
    """One turn of the stream with its ground truth."""

    model_config = ConfigDict(frozen=True)
    t: int
    question_id: int
    category: str
    answer: str
    prompt: str
    """Exactly what the agent is asked."""
    inject: bool
    """Selected for injection (u_t < λ)."""
    domain: str | None
    injected: bool
    """The prompt carries a checked rewrite (inject and the generator succeeded)."""
    strategy: Strategy | None = None
    intact_as_written: bool = False
    repaired: bool = False
    fallback: bool = False
    """Selected, but every attempt failed: the original question was used."""
    attempts: list[Attempt] = []
    reasoning: str = ""


class StreamSummary(BaseModel):
    """Counts over a stream: how well the generator did (valid-rewrite rate)."""

    model_config = ConfigDict(frozen=True)
    turns: int
    selected: int
    injected: int
    intact_as_written: int
    repaired: int
    fallback: int
    attempts: int
    failure_reasons: dict[str, int]
    strategies: dict[str, int]
    domains: dict[str, int]
    valid_rate: float | None
    """injected / selected: rewrites usable under the run's intact policy."""
    strict_valid_rate: float | None
    """intact_as_written / selected: valid JSON that kept the question verbatim unaided."""


def summarize(turns: Sequence[StreamTurn]) -> StreamSummary:
    """Counts and rates of a stream (rates are None with no selected turn)."""
    selected = [t for t in turns if t.inject]
    reasons = Counter(a.reason for t in selected for a in t.attempts if not a.ok)
    n = len(selected)
    return StreamSummary(
        turns=len(turns),
        selected=n,
        injected=sum(t.injected for t in turns),
        intact_as_written=sum(t.intact_as_written for t in turns),
        repaired=sum(t.repaired for t in turns),
        fallback=sum(t.fallback for t in turns),
        attempts=sum(len(t.attempts) for t in turns),
        failure_reasons=dict(sorted(reasons.items())),
        strategies=dict(sorted(Counter(t.strategy.value for t in turns if t.strategy).items())),
        domains=dict(sorted(Counter(t.domain for t in turns if t.injected and t.domain).items())),
        valid_rate=sum(t.injected for t in selected) / n if n else None,
        strict_valid_rate=sum(t.intact_as_written for t in selected) / n if n else None,
    )


def read_stream(path: Path) -> list[StreamTurn]:
    """Turns cached at ``path`` (none if it does not exist), checked to be 1..n in order."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    if text and not text.endswith("\n"):
        # A run killed mid-write leaves a partial last line: that turn is regenerated.
        text = text[: text.rfind("\n") + 1]
        path.write_text(text, encoding="utf-8")
    turns = [StreamTurn.model_validate_json(line) for line in text.splitlines() if line.strip()]
    for i, turn in enumerate(turns, 1):
        if turn.t != i:
            raise ConfigError(f"stream cache {path} is corrupt: line {i} holds turn {turn.t}")
    return turns


def _meta_path(path: Path) -> Path:
    return path.with_suffix(".meta.json")


async def generate_stream(
    spec: StreamSpec,
    plan: Sequence[TurnPlan],
    path: Path,
    generator: BiasGenerator | None,
    *,
    on_turn: Callable[[StreamTurn], None] | None = None,
) -> list[StreamTurn]:
    """Generate (or continue, or just load) the stream cached at ``path``.

    A cache written for another spec is refused. ``generator`` may be None only
    when no remaining turn needs a rewrite.
    """
    meta = _meta_path(path)
    if meta.exists():
        cached = StreamSpec.model_validate_json(meta.read_text(encoding="utf-8"))
        if cached != spec:
            raise ConfigError(f"stream cache {path} was generated for another spec; remove it")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        meta.write_text(spec.model_dump_json(indent=2) + "\n", encoding="utf-8")
    turns = read_stream(path)
    if len(turns) > len(plan):
        raise ConfigError(f"stream cache {path} has more turns than the plan")
    for done, item in zip(turns, plan, strict=False):
        if done.question_id != item.question.question_id or done.inject != item.inject:
            raise ConfigError(f"stream cache {path} does not match its plan at turn {done.t}")
    bias_list = load_bias_list(spec.bias_list)
    with path.open("a", encoding="utf-8") as fh:
        for item in plan[len(turns) :]:
            q = item.question
            base: dict[str, Any] = {
                "t": item.t,
                "question_id": q.question_id,
                "category": q.category,
                "answer": q.answer,
                "inject": item.inject,
                "domain": item.domain,
            }
            if item.inject and item.domain is not None:
                if generator is None:
                    raise ConfigError("the stream needs rewrites but no generator is configured")
                result = await generator.rewrite(
                    q,
                    bias_list.for_domain(item.domain),
                    seed=spec.seed * 100_000 + item.t,
                    turn=item.t,
                )
                turn = StreamTurn(
                    **base,
                    prompt=result.prompt,
                    injected=result.valid,
                    strategy=result.strategy,
                    intact_as_written=result.intact_as_written,
                    repaired=result.repaired,
                    fallback=not result.valid,
                    attempts=result.attempts,
                    reasoning=result.reasoning,
                )
            else:
                turn = StreamTurn(**base, prompt=q.plain_prompt(), injected=False)
            fh.write(turn.model_dump_json() + "\n")
            fh.flush()
            turns.append(turn)
            if on_turn is not None:
                on_turn(turn)
    return turns
