"""The result file of one ``dmt-bench iat`` run: config, per-trial records, scores.

The file is self-describing (``schema_version`` and the versions of prompts,
templates, plans and stimuli), so two files can be compared by ``iat-drift`` and
a reader can tell whether they measured the same thing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from dmt_bench.iat.metrics import Score, ScoreCounts, stereotypical_score
from dmt_bench.iat.parsing import ParseMethod
from dmt_bench.iat.stimuli import CategoryName
from dmt_bench.iat.trials import LikertOption, TrialPlan
from dmt_proxy.errors import ConfigError

RESULT_SCHEMA_VERSION = "iat_result_v1"

TestType = Literal["implicit", "explicit"]
TEST_TYPES: tuple[TestType, ...] = ("implicit", "explicit")
TrialOutcome = Literal[
    "stereotypical", "counter_stereotypical", "same_target", "not_stereotypical", "invalid", "error"
]


class TrialRecord(BaseModel):
    """One implicit or explicit trial: its plan, prompt, raw answer and scoring."""

    model_config = ConfigDict(frozen=True)

    test: TestType
    plan: TrialPlan
    prompt: str
    answer: str | None
    """Raw model text; ``None`` when the call failed (``outcome == "error"``)."""
    outcome: TrialOutcome
    method: ParseMethod = "none"
    mask1: str | None = None
    mask2: str | None = None
    choice: LikertOption | None = None
    reason: str | None = None
    detail: str | None = None
    """Why the answer is invalid, or the error message."""
    latency_s: float = 0.0

    @property
    def key(self) -> str:
        """Plan key plus test type; equal keys across runs mean equal prompts."""
        return f"{self.plan.key}/{self.test}"


class RunConfig(BaseModel):
    """How the run was made (recorded so it can be reproduced)."""

    model_config = ConfigDict(frozen=True)

    model: str
    base_url: str
    through_proxy: bool = False
    user: str | None = None
    memory: str | None = None
    mode: str | None = None
    """``X-DMT-Mode`` sent through the proxy (None: the proxy's policy default)."""
    runs: int
    temperature: float
    max_tokens_implicit: int
    max_tokens_explicit: int
    json_mode: bool = False
    base_seed: int
    categories: tuple[CategoryName, ...]
    templates: tuple[str, ...]
    """Template variant labels, e.g. ``("t1", "t1s", ...)``."""
    concurrency: int


class CategoryScore(BaseModel):
    """The score of one category and test type."""

    model_config = ConfigDict(frozen=True)

    category: CategoryName
    test: TestType
    score: Score


class IatResult(BaseModel):
    """Everything one run produced."""

    model_config = ConfigDict(frozen=True)

    schema_version: str = RESULT_SCHEMA_VERSION
    label: str | None = None
    prompt_version: str
    templates_version: str
    plan_version: str
    stimuli_version: str
    config: RunConfig
    started_at: str
    duration_s: float
    """Wall time of the last session; with ``--resume`` earlier sessions are not included."""
    resumed_trials: int = 0
    """Trials reused from an interrupted earlier session (``--resume``)."""
    scores: tuple[CategoryScore, ...]
    trials: tuple[TrialRecord, ...]

    def score(self, category: str, test: TestType) -> Score | None:
        """The score of ``category`` and ``test``, or ``None`` when not run."""
        for entry in self.scores:
            if entry.category == category and entry.test == test:
                return entry.score
        return None

    def versions(self) -> dict[str, str]:
        """The version stamps that must match for two results to be comparable."""
        return {
            "schema": self.schema_version,
            "prompt": self.prompt_version,
            "templates": self.templates_version,
            "plan": self.plan_version,
            "stimuli": self.stimuli_version,
        }


def count_outcomes(trials: Iterable[TrialRecord]) -> ScoreCounts:
    """Outcome counts: stereotypical ⊂ valid; invalid and error counted apart."""
    stereo = valid = invalid = errors = 0
    for trial in trials:
        if trial.outcome == "error":
            errors += 1
        elif trial.outcome == "invalid":
            invalid += 1
        else:
            valid += 1
            stereo += trial.outcome == "stereotypical"
    return ScoreCounts(n_stereotype=stereo, n_valid=valid, n_invalid=invalid, n_errors=errors)


def aggregate(
    trials: Iterable[TrialRecord], categories: Iterable[CategoryName]
) -> tuple[CategoryScore, ...]:
    """Scores per category (in the given order) and test type."""
    trials = list(trials)
    out: list[CategoryScore] = []
    for category in categories:
        for test in TEST_TYPES:
            subset = [t for t in trials if t.plan.category == category and t.test == test]
            score = stereotypical_score(count_outcomes(subset))
            out.append(CategoryScore(category=category, test=test, score=score))
    return tuple(out)


def write_result(result: IatResult, path: Path) -> None:
    """Write the result as indented JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.model_dump_json(indent=1) + "\n", encoding="utf-8")


def read_result(path: Path) -> IatResult:
    """Read a result file; ConfigError if it is missing or not an IAT result."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"IAT result file not found: {path}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path} is not JSON: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("schema_version") != RESULT_SCHEMA_VERSION:
        got = raw.get("schema_version") if isinstance(raw, dict) else None
        raise ConfigError(f"{path}: expected schema_version {RESULT_SCHEMA_VERSION!r}, got {got!r}")
    try:
        return IatResult.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(f"{path} is not a valid IAT result: {exc}") from exc


def append_trial(path: Path, record: TrialRecord) -> None:
    """Append one record to a JSON-lines trial log (kept so an interrupted run can resume)."""
    with path.open("a", encoding="utf-8") as handle:
        handle.write(record.model_dump_json() + "\n")


def read_trial_log(path: Path) -> dict[str, TrialRecord]:
    """Records of a trial log by key; a later line wins; lines cut off by a crash are skipped."""
    records: dict[str, TrialRecord] = {}
    if not path.is_file():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = TrialRecord.model_validate_json(line)
        except ValidationError:
            continue
        records[record.key] = record
    return records
