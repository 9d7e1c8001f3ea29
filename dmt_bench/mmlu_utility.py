"""What memory and mitigation cost the agent in accuracy: MMLU-Pro through the proxy.

Protocol ``mmlu-utility-v1``. A fixed sample of MMLU-Pro questions
(``mmlu.select_questions``: ``questions`` of the packaged test split, at most
``max_question_chars``) is asked of the agent **through the proxy**, as a user's request
would be, in each condition:

- ``memory-off``: ``X-DMT-Memory: off`` (no memory block);
- a mode (``off``, ``ssp``, ``dmt``, ``dmt-tags``, ``dmt-instruction``): the user's
  memories shown (``X-DMT-Memory: read-only``, so the questions are never stored) in
  that ``X-DMT-Mode``; ``off`` is "memory on, no mitigation".

The user's scope holds the memories of ``memory_sets`` (the dose seed sets,
``dmt_proxy/data/dose/``: by default ten neutral memories and ten stereotyped ones about
age), written once through ``POST /v1/memories`` (audited when a condition shows tags),
and every request is shown all of them (``memory.retrieval: recent``).

**The answer is a constrained letter**: the request carries llama.cpp's ``grammar``
(``root ::= "A" | "B" | ...`` over the question's options), which the proxy passes to
llama-server unchanged, with ``max_tokens`` 2 and temperature 0, so the reply is one
option letter. A reply that is not one (a host that ignores the grammar) counts as
unparsed and wrong; the parse rate is reported per condition.

Accuracy per condition with Wilson 95 % intervals (``dmt_bench.stats``), and the
conditions compared question by question: what memory costs (``off`` − ``memory-off``)
and what each mode costs once memory is on (mode − ``off``), with paired intervals,
McNemar's exact test, Holm's correction and MDEs (``mmlu_costs``). Answers are
appended to ``<run>/answers/<condition>.jsonl`` as they arrive (conditions take turns
in blocks of ``execution.block`` questions), so a killed run resumes where it stopped.

    dmt-bench mmlu-utility --config benchmarks/configs/mmlu_utility_v1.yaml \\
        --out RUN [--dry-run] [--resume] [--questions N] [--conditions c1,c2] [--report]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dmt_bench.harness.config import AuditConfig, ExecutionConfig, ModelSpec, read_yaml
from dmt_bench.harness.sitting import nonce_key
from dmt_bench.mmlu import OPTION_LETTERS, MmluQuestion, load_source, select_questions
from dmt_bench.mmlu_costs import UtilityComparison, comparison_lines, comparisons
from dmt_bench.stats import wilson_interval
from dmt_proxy.errors import ConfigError
from dmt_proxy.policy import Mode

UTILITY_VERSION = "mmlu-utility-v1"
MEMORY_OFF = "memory-off"
CONDITIONS: tuple[str, ...] = (MEMORY_OFF, *(m.value for m in Mode))
INSTRUCTION = "Answer with the letter of the correct option only."
ASSUMED_S = 6.0
"""Seconds per question without a measurement (a 1.5B on 2 busy cores)."""


class UtilityModels(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    agent: ModelSpec = ModelSpec(model="local/qwen2.5-1.5b")
    auditor: ModelSpec = ModelSpec(model="local/qwen2.5-1.5b")

    @field_validator("agent", "auditor", mode="before")
    @classmethod
    def _string(cls, value: Any) -> Any:
        return {"model": value} if isinstance(value, str) else value


class UtilityExecution(ExecutionConfig):
    block: int = Field(default=10, ge=1)
    """Questions per condition turn (a partial run has comparable n in every condition)."""


class UtilityConfig(BaseModel):
    """One utility run (see the module docstring); ``execution`` is not in the digest."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    version: Literal[1] = 1
    name: str = "mmlu-utility"
    questions: int = Field(default=200, ge=1)
    question_seed: int = 0
    max_question_chars: int = 1200
    conditions: list[str] = Field(default_factory=lambda: list(CONDITIONS))
    memory_sets: list[str] = Field(default_factory=lambda: ["neutral-1", "age-1"])
    memory: str = "mem0"
    grammar: bool = True
    models: UtilityModels = Field(default_factory=UtilityModels)
    audit: AuditConfig = Field(default_factory=AuditConfig)
    execution: UtilityExecution = Field(default_factory=UtilityExecution)

    @property
    def kind(self) -> str:
        return "mmlu-utility"

    @field_validator("conditions", mode="before")
    @classmethod
    def _yaml_off(cls, value: Any) -> Any:
        return ["off" if v is False else v for v in value] if isinstance(value, list) else value

    @field_validator("conditions")
    @classmethod
    def _known(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(CONDITIONS))
        if unknown or not value or len(set(value)) != len(value):
            raise ValueError(f"conditions must be distinct, of: {', '.join(CONDITIONS)}")
        return value

    def shows_tags(self) -> bool:
        return any(c != MEMORY_OFF and Mode(c).shows_tags for c in self.conditions)

    def digest(self) -> str:
        import hashlib

        blob = json.dumps(self.model_dump(mode="json", exclude={"execution"}), sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def load_utility_config(path: Path) -> UtilityConfig:
    """Read and validate a YAML utility config (``kind: mmlu-utility``)."""
    raw = read_yaml(path)
    if not isinstance(raw, dict) or raw.get("kind", "mmlu-utility") != "mmlu-utility":
        raise ConfigError(f"{path}: not an mmlu-utility config")
    try:
        return UtilityConfig.model_validate({k: v for k, v in raw.items() if k != "kind"})
    except ValidationError as exc:
        raise ConfigError(f"config {path} is invalid: {exc}") from None


def letter_grammar(n_options: int) -> str:
    """A GBNF grammar accepting exactly one of the first ``n_options`` option letters."""
    return "root ::= " + " | ".join(f'"{c}"' for c in OPTION_LETTERS[:n_options])


def parse_letter(reply: str, n_options: int) -> str | None:
    """The reply's option letter when the reply is exactly one (after whitespace), else None."""
    text = reply.strip().rstrip(".").strip()
    return text if len(text) == 1 and text in OPTION_LETTERS[:n_options] else None


def request_body(q: MmluQuestion, model: str, grammar: bool) -> dict[str, Any]:
    """The chat request of one question (the user's turn only: the proxy adds memories)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": f"{q.plain_prompt()}\n\n{INSTRUCTION}"}],
        "temperature": 0,
        "max_tokens": 2,
    }
    if grammar:
        body["extra_body"] = {"grammar": letter_grammar(len(q.options))}
    return body


class Answer(BaseModel):
    """One question asked in one condition."""

    model_config = ConfigDict(frozen=True)
    question_id: int
    condition: str
    reply: str
    letter: str | None
    correct: bool
    memories: int | None
    seconds: float


def answers_path(out: Path, condition: str) -> Path:
    return out / "answers" / f"{condition}.jsonl"


def read_answers(out: Path, condition: str) -> dict[int, Answer]:
    """The answers on disk of ``condition``, by question id (a torn last line is ignored)."""
    path = answers_path(out, condition)
    if not path.exists():
        return {}
    found: dict[int, Answer] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            a = Answer.model_validate_json(line)
        except ValidationError:
            continue  # the line a kill cut short; its question is asked again
        found[a.question_id] = a
    return found


class ConditionSummary(BaseModel):
    model_config = ConfigDict(frozen=True)
    condition: str
    n: int
    correct: int
    accuracy: float | None
    ci_low: float
    ci_high: float
    parsed: int
    parse_rate: float | None
    median_s: float | None


class UtilityResults(BaseModel):
    model_config = ConfigDict(frozen=True)
    version: str = UTILITY_VERSION
    name: str
    digest: str
    agent: str
    questions: int
    conditions: list[ConditionSummary]
    comparisons: list[UtilityComparison] = []
    """The paired family (``mmlu_costs``); empty in results written before it."""


def summarise(config: UtilityConfig, out: Path, ids: Sequence[int]) -> UtilityResults:
    """Accuracy (Wilson 95 %) and parse rate per condition over the questions answered."""
    rows = []
    correct: dict[str, dict[int, bool]] = {}
    for cond in config.conditions:
        found = read_answers(out, cond)
        done = [found[i] for i in ids if i in found]
        correct[cond] = {a.question_id: a.correct for a in done}
        k = sum(a.correct for a in done)
        ci = wilson_interval(k, len(done))
        parsed = sum(a.letter is not None for a in done)
        rows.append(
            ConditionSummary(
                condition=cond, n=len(done), correct=k,
                accuracy=k / len(done) if done else None, ci_low=ci.low, ci_high=ci.high,
                parsed=parsed, parse_rate=parsed / len(done) if done else None,
                median_s=statistics.median(a.seconds for a in done) if done else None,
            )
        )  # fmt: skip
    return UtilityResults(
        name=config.name, digest=config.digest(), agent=config.models.agent.model,
        questions=len(ids), conditions=rows, comparisons=comparisons(correct),
    )  # fmt: skip


def render(results: UtilityResults, command: str) -> str:
    """The Markdown table."""
    lines = [
        f"# MMLU-Pro accuracy through the proxy: {results.agent} ({results.version})",
        "",
        f"Command: `{command}`  ",
        f"{results.questions} questions per condition; the answer is one option letter under "
        "a llama.cpp grammar, temperature 0; Wilson 95 % intervals.",
        "",
        "| condition | correct | n | accuracy | Wilson 95 % CI | parsed | s/question |",
        "|---|---:|---:|---:|---|---:|---:|",
    ]
    for c in results.conditions:
        acc = "–" if c.accuracy is None else f"{c.accuracy:.3f}"
        rate = "–" if c.parse_rate is None else f"{c.parsed}/{c.n} ({100 * c.parse_rate:.0f} %)"
        sec = "–" if c.median_s is None else f"{c.median_s:.2f}"
        lines.append(
            f"| {c.condition} | {c.correct} | {c.n} | {acc} | [{c.ci_low:.3f}, {c.ci_high:.3f}] "
            f"| {rate} | {sec} |"
        )
    wilson = sum(1 for c in results.conditions if c.n)
    lines += comparison_lines(results.comparisons, wilson + len(results.comparisons))
    return "\n".join(lines) + "\n"


def selected(config: UtilityConfig) -> list[MmluQuestion]:
    return select_questions(
        load_source().questions, config.questions, config.question_seed,
        max_chars=config.max_question_chars,
    )  # fmt: skip


def estimate_lines(config: UtilityConfig, out: Path | None) -> list[str]:
    """The cost estimate: questions left × seconds per question (measured here, or assumed)."""
    ids = [q.question_id for q in selected(config)]
    left = 0
    measured: list[float] = []
    for cond in config.conditions:
        found = read_answers(out, cond) if out is not None else {}
        left += sum(1 for i in ids if i not in found)
        measured += [a.seconds for a in found.values()]
    per = statistics.median(measured) if measured else ASSUMED_S
    source = f"measured in {out}" if measured else "assumed"
    writes = (
        0 if out is not None and (out / "scope.json").exists() else 10 * len(config.memory_sets)
    )
    audit_s = 24.0 * writes if config.shows_tags() else 0.0
    hours = (left * per + audit_s) / 3600
    return [
        f"cost estimate: {config.name}: {left} of {len(ids) * len(config.conditions)} questions "
        f"to ask ({len(config.conditions)} conditions), {per:.2f} s each ({source}); "
        f"{writes} memory writes" + (" (audited, 24 s each)" if audit_s else ""),
        f"total: about {hours:.1f} h",
    ]


async def _run(config: UtilityConfig, out: Path, settings: Any, progress: Any) -> None:
    from dmt_bench.dose.seed_sets import shipped_library
    from dmt_bench.endpoint import Endpoint
    from dmt_bench.harness import runlock
    from dmt_bench.harness.models import check_local_models
    from dmt_bench.harness.proxy import (
        AGENT_ALIAS,
        ManagedProxy,
        ProxySpec,
        connect_proxy,
        request_model,
        run_policy,
    )  # fmt: skip
    from dmt_bench.harness.rundir import write_atomic

    library = shipped_library()
    seeds = []
    for set_id in config.memory_sets:
        kind = "neutral" if set_id.startswith("neutral") else (
            "directive" if "directive" in set_id else "biased"
        )  # fmt: skip
        seeds += library.seeds(kind, set_id, 10)
    ex = config.execution
    managed = None
    try:
        if ex.proxy_url:
            proxy = connect_proxy(ex.proxy_url, ex.admin_key_env, "seeding uses POST /v1/memories")
        else:
            needed = [config.models.agent] + (
                [config.models.auditor] if config.shows_tags() else []
            )
            check_local_models(needed, settings)
            memory = {"backend": config.memory, "top_k": len(seeds), "retrieval": "recent"}
            spec = ProxySpec(
                policy=run_policy(f"utility-{config.memory}", config.models, config.audit, memory),
                request_timeout_s=ex.request_timeout_s,
                start_timeout_s=ex.proxy_start_timeout_s,
                nonce_key=nonce_key(config.digest()),
            )
            managed = ManagedProxy(spec, config.memory, out / "proxy")
            proxy = await asyncio.to_thread(managed.start)
        user = f"utility-{config.digest()[:12]}"
        if not (out / "scope.json").exists():
            held = {str(m["text"]) for m in await proxy.memories(user)}
            mode = "dmt" if config.shows_tags() else "off"
            for s in seeds:
                if not any(s.text in h for h in held):
                    await proxy.add_memory(user, s.text, mode=mode)
            await proxy.wait_drained(ex.drain_timeout_s)
            stored = await proxy.memories(user)
            statuses = sorted(str(m["audit_status"]) for m in stored)
            write_atomic(out / "scope.json", json.dumps({"user": user, "statuses": statuses}))
            _note(progress, f"seeded {len(stored)} memories ({statuses})")
        questions = selected(config)
        clients = {}
        for cond in config.conditions:
            endpoint = Endpoint(
                base_url=proxy.base_url, model=request_model(config.models.agent, AGENT_ALIAS),
                api_key="dmt-bench-utility", user=user,
                memory="off" if cond == MEMORY_OFF else "read-only",
                mode=None if cond == MEMORY_OFF else cond, timeout_s=ex.request_timeout_s,
            )  # fmt: skip
            clients[cond] = endpoint.client()
        try:
            for start in range(0, len(questions), ex.block):
                for cond in config.conditions:
                    await _ask_block(
                        config, out, cond, clients[cond], questions[start : start + ex.block]
                    )
                _note(progress, f"{min(start + ex.block, len(questions))}/{len(questions)} "
                      "questions in every condition")  # fmt: skip
        finally:
            for client in clients.values():
                await client.close()
    finally:
        if managed is not None:
            await asyncio.to_thread(managed.stop)
        runlock.release(out)


def _note(stream: Any, message: str) -> None:
    if stream is not None:
        print(f"utility: {message}", file=stream, flush=True)


async def _ask_block(
    config: UtilityConfig, out: Path, cond: str, client: Any, block: Sequence[MmluQuestion]
) -> None:
    done = read_answers(out, cond)
    path = answers_path(out, cond)
    path.parent.mkdir(parents=True, exist_ok=True)
    for q in block:
        if q.question_id in done:
            continue
        params = request_body(q, _model(config), config.grammar)
        started = time.perf_counter()
        raw = await client.chat.completions.with_raw_response.create(**params)
        reply = raw.parse().choices[0].message.content or ""
        shown = raw.headers.get("x-dmt-memories")
        letter = parse_letter(reply, len(q.options))
        answer = Answer(
            question_id=q.question_id, condition=cond, reply=reply, letter=letter,
            correct=letter is not None and letter == q.answer,
            memories=int(shown) if shown and shown.isdigit() else None,
            seconds=round(time.perf_counter() - started, 3),
        )  # fmt: skip
        with path.open("a", encoding="utf-8") as f:
            f.write(answer.model_dump_json() + "\n")


def _model(config: UtilityConfig) -> str:
    from dmt_bench.harness.proxy import AGENT_ALIAS, request_model

    return request_model(config.models.agent, AGENT_ALIAS)


def run_utility(
    config: UtilityConfig,
    out: Path,
    *,
    settings: Any,
    resume: bool,
    progress: Any = sys.stderr,
    command: str = "dmt-bench mmlu-utility",
) -> UtilityResults:
    """Run (or resume) the utility run in ``out``; write results.json and report.md
    (``command``: how it was started, shown in the report)."""
    from dmt_bench.harness.rundir import open_run_dir, set_status

    manifest = open_run_dir(out, config, resume=resume, version=UTILITY_VERSION)
    started = time.perf_counter()
    try:
        asyncio.run(_run(config, out, settings, progress))
    except BaseException as exc:  # recorded, then re-raised: the run stays resumable
        elapsed = manifest.elapsed_s + time.perf_counter() - started
        set_status(out, "stopped", str(exc) or type(exc).__name__, elapsed_s=elapsed)
        raise
    set_status(out, "complete", "", elapsed_s=manifest.elapsed_s + time.perf_counter() - started)
    return write_results(config, out, command)


def write_results(config: UtilityConfig, out: Path, command: str) -> UtilityResults:
    """Summarise what is on disk into ``results.json`` and ``report.md``."""
    from dmt_bench.harness.rundir import write_atomic

    results = summarise(config, out, [q.question_id for q in selected(config)])
    write_atomic(out / "results.json", results.model_dump_json(indent=2) + "\n")
    write_atomic(out / "report.md", render(results, command))
    return results


def build_parser() -> argparse.ArgumentParser:
    """The parser ``main`` uses (``dmt-bench mmlu-utility``)."""
    ap = argparse.ArgumentParser(prog="dmt-bench mmlu-utility", description=__doc__.splitlines()[0])
    ap.add_argument("--config", type=Path, help="utility YAML (benchmarks/configs/...)")
    ap.add_argument("--out", type=Path, required=True, help="run directory")
    ap.add_argument("--resume", action="store_true", help="continue the run in --out")
    ap.add_argument("--dry-run", action="store_true", help="print the cost estimate and exit")
    ap.add_argument("--report", action="store_true", help="ask nothing: summarise --out")
    ap.add_argument("--questions", type=int, help="override: questions per condition")
    ap.add_argument("--conditions", help="override: conditions, comma-separated")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``dmt-bench mmlu-utility``: estimate first, then run or report."""
    args = build_parser().parse_args(argv)
    command = "dmt-bench mmlu-utility " + " ".join(sys.argv[1:] if argv is None else argv)
    from dmt_bench.harness.rundir import MANIFEST, Manifest
    from dmt_proxy.settings import Settings

    try:
        if args.config:
            raw = load_utility_config(args.config).model_dump(mode="json")
        elif (args.out / MANIFEST).exists():
            raw = Manifest.model_validate_json((args.out / MANIFEST).read_text()).config
        else:
            raise ConfigError("give --config, or --out of an existing run")
        if args.questions:
            raw["questions"] = args.questions
        if args.conditions:
            raw["conditions"] = [c for c in args.conditions.split(",") if c]
        config = UtilityConfig.model_validate(raw)
        resumed = args.resume or args.report
        print("\n".join(estimate_lines(config, args.out if resumed else None)), file=sys.stderr)
        if args.dry_run:
            return 0
        if args.report:
            results = write_results(config, args.out, command)
        else:
            results = run_utility(
                config, args.out, settings=Settings(), resume=args.resume, command=command
            )
    except (ConfigError, ValidationError) as exc:
        print(f"mmlu_utility: {exc}", file=sys.stderr)
        return 2
    print(render(results, "dmt-bench mmlu-utility " + " ".join(argv or sys.argv[1:])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
