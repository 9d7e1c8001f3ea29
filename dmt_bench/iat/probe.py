"""One probe run (every trial of a plan set against one endpoint), resumable from its trial log.

Shared by ``dmt-bench iat`` (one endpoint) and ``dmt-bench iat-drift --run`` (one
probe per condition and time point through the proxy). A probe directory holds::

    iat_run.json       the RunConfig, checked before resuming
    iat_trials.jsonl   every answered trial, appended as it completes
    iat_result.json    the finished result (written by the caller)
    iat_report.md
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from collections.abc import Collection
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from dmt_bench.endpoint import Endpoint
from dmt_bench.iat.prompts import PROMPT_VERSION
from dmt_bench.iat.report import report_markdown
from dmt_bench.iat.results import (
    IatResult,
    RunConfig,
    TrialRecord,
    aggregate,
    append_trial,
    read_trial_log,
    write_result,
)
from dmt_bench.iat.runner import (
    DEFAULT_MAX_TOKENS,
    EndpointChat,
    Progress,
    SamplingConfig,
    run_trials,
)
from dmt_bench.iat.stimuli import CategoryName, load_stimuli
from dmt_bench.iat.templates import TEMPLATES_VERSION, VARIANTS, TemplateVariant
from dmt_bench.iat.trials import PLAN_VERSION, make_plans
from dmt_proxy.errors import ConfigError

RUN_FILE = "iat_run.json"
TRIAL_LOG = "iat_trials.jsonl"
RESULT_FILE = "iat_result.json"
REPORT_FILE = "iat_report.md"


class ProbeSettings(BaseModel):
    """What is asked and how (everything but the endpoint)."""

    model_config = ConfigDict(frozen=True)

    runs: int = Field(default=20, ge=1)
    categories: tuple[CategoryName, ...]
    templates: tuple[int, ...] = (1, 2, 3, 4, 5)
    """Template numbers; each is run plain and swapped."""
    temperature: float = 0.0
    seed: int = 0
    max_tokens: int | None = None
    """Overrides both tests' default ``max_tokens`` when set."""
    json_mode: bool = False
    concurrency: int = 4

    @property
    def variants(self) -> tuple[TemplateVariant, ...]:
        """The template variants of ``templates``."""
        return tuple(v for v in VARIANTS if v.template in self.templates)


def parse_templates(spec: str | None) -> tuple[int, ...]:
    """``"1,3"`` -> ``(1, 3)``; None or empty -> all five."""
    every = tuple(sorted({v.template for v in VARIANTS}))
    if not spec:
        return every
    try:
        wanted = {int(x) for x in spec.split(",") if x.strip()}
    except ValueError as exc:
        raise ConfigError(f"--templates takes numbers 1-5, got {spec!r}") from exc
    if not wanted or not wanted <= set(every):
        raise ConfigError(f"--templates takes numbers 1-5, got {spec!r}")
    return tuple(sorted(wanted))


class ProgressPrinter:
    """Progress lines on stderr: about every 5 % or 10 s, and at the end."""

    def __init__(self, prefix: str = "iat") -> None:
        self.prefix = prefix
        self._last_done = 0
        self._last_t = time.perf_counter()

    def __call__(self, p: Progress) -> None:
        step = max(1, p.total // 20)
        now = time.perf_counter()
        if p.done == p.total or p.done - self._last_done >= step or now - self._last_t >= 10:
            rate = p.elapsed_s / p.done if p.done else 0.0
            print(
                f"{self.prefix}: {p.done}/{p.total} trials, {p.invalid} invalid, "
                f"{p.errors} errors, {p.elapsed_s:.0f}s ({rate:.2f}s/trial)",
                file=sys.stderr,
                flush=True,
            )
            self._last_done, self._last_t = p.done, now


def run_config(endpoint: Endpoint, settings: ProbeSettings, *, through_proxy: bool) -> RunConfig:
    """The RunConfig recorded for a probe of ``settings`` against ``endpoint``."""
    return RunConfig(
        model=endpoint.model,
        base_url=endpoint.base_url,
        through_proxy=through_proxy,
        user=endpoint.user,
        memory=endpoint.memory,
        mode=endpoint.mode,
        runs=settings.runs,
        temperature=settings.temperature,
        max_tokens_implicit=settings.max_tokens or DEFAULT_MAX_TOKENS["implicit"],
        max_tokens_explicit=settings.max_tokens or DEFAULT_MAX_TOKENS["explicit"],
        json_mode=settings.json_mode,
        base_seed=settings.seed,
        categories=settings.categories,
        templates=tuple(v.label for v in settings.variants),
        concurrency=settings.concurrency,
    )


def same_run(a: RunConfig, b: RunConfig, ignore: Collection[str]) -> bool:
    """Equal apart from the fields in ``ignore`` (settings that do not change answers)."""
    blank = {name: getattr(b, name) for name in ignore}
    return a.model_copy(update=blank) == b


def _resumable(
    out: Path, config: RunConfig, resume: bool, ignore: Collection[str], prefix: str
) -> dict[str, TrialRecord]:
    """Records of an earlier run in ``out`` to reuse (``resume``); checks it is the same run."""
    config_path, log_path = out / RUN_FILE, out / TRIAL_LOG
    if not resume:
        if log_path.exists():
            raise ConfigError(f"{log_path} exists: pass --resume to continue it, or another --out")
        out.mkdir(parents=True, exist_ok=True)
        config_path.write_text(config.model_dump_json(indent=1) + "\n", encoding="utf-8")
        return {}
    if not config_path.is_file():
        raise ConfigError(f"--resume: no earlier run in {out} ({config_path.name} missing)")
    earlier = RunConfig.model_validate_json(config_path.read_text(encoding="utf-8"))
    if not same_run(earlier, config, ignore):
        raise ConfigError(f"--resume: the run in {out} used other settings: {earlier}")
    # the file records the latest session (its URL and concurrency)
    config_path.write_text(config.model_dump_json(indent=1) + "\n", encoding="utf-8")
    done = {k: r for k, r in read_trial_log(log_path).items() if r.outcome != "error"}
    print(f"{prefix}: resuming, {len(done)} trials already answered", file=sys.stderr)
    return done


async def run_probe(
    endpoint: Endpoint,
    settings: ProbeSettings,
    out: Path,
    *,
    through_proxy: bool,
    resume: bool = False,
    label: str | None = None,
    resume_ignores: Collection[str] = ("concurrency",),
    prefix: str = "iat",
) -> IatResult:
    """Ask every trial of ``settings`` (or the rest of an interrupted run) and score them."""
    stimuli = load_stimuli()
    variants = settings.variants
    plans = make_plans(
        [stimuli.get(n) for n in settings.categories], settings.runs, settings.seed, variants
    )
    config = run_config(endpoint, settings, through_proxy=through_proxy)
    sampling = SamplingConfig(
        model=endpoint.model_name(),
        temperature=settings.temperature,
        max_tokens_implicit=config.max_tokens_implicit,
        max_tokens_explicit=config.max_tokens_explicit,
        json_mode=settings.json_mode,
    )
    print(
        f"{prefix}: {len(plans) * 2} trials ({len(settings.categories)} categories x "
        f"{len(variants)} templates x {settings.runs} runs x 2 tests) against "
        f"{endpoint.base_url} model {endpoint.model}",
        file=sys.stderr,
    )
    done = _resumable(out, config, resume, resume_ignores, prefix)
    log_path = out / TRIAL_LOG
    chat = EndpointChat(endpoint)
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    t0 = time.perf_counter()
    try:
        await chat.check_reachable()
        trials = await run_trials(
            chat,
            plans,
            sampling,
            concurrency=settings.concurrency,
            on_progress=ProgressPrinter(prefix),
            on_record=lambda record: append_trial(log_path, record),
            done=done,
        )
    finally:
        await chat.close()
    return IatResult(
        label=label,
        prompt_version=PROMPT_VERSION,
        templates_version=TEMPLATES_VERSION,
        plan_version=PLAN_VERSION,
        stimuli_version=stimuli.version,
        config=config,
        started_at=started_at,
        duration_s=time.perf_counter() - t0,
        resumed_trials=len(done),
        scores=aggregate(trials, settings.categories),
        trials=tuple(trials),
    )


def write_probe(result: IatResult, out: Path, label: str) -> None:
    """Write ``iat_result.json`` and ``iat_report.md`` into the probe directory."""
    write_result(result, out / RESULT_FILE)
    (out / REPORT_FILE).write_text(report_markdown(result, label), encoding="utf-8")
