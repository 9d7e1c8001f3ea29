"""The agent loop of one condition, as a LangGraph graph with a SQLite checkpointer.

State: ``t`` (turns done) and ``audited`` (checkpoints audited). From any state
the router picks ``audit`` (t is a checkpoint not yet audited), ``turn`` (t < T)
or the end. The checkpointer (``<run>/checkpoints.sqlite``, one thread per
memory architecture and condition) saves the state after every node, so a killed
run resumes at the node it was in.

Nodes have side effects, made safe to repeat:

* ``turn`` sends day t+1's question through the proxy as the condition's user, in
  the condition's mode, then waits until the proxy's outbox is empty (the write
  is stored and, in DMT modes, audited before the next request can retrieve it).
  Before sending, it looks for the question among the user's memories: if a
  crash came after the proxy received the request, the turn is recovered from
  the stored memory instead of being sent twice.
* ``audit`` asks the DIB sample through the proxy with ``X-DMT-Memory:
  read-only`` (nothing written; paper §4.1) and writes the decisions atomically.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import openai

from dmt_bench.dib.runner import run_with_retries
from dmt_bench.dib.schema import Sample
from dmt_bench.dib.scorer import DecisionResult, Outcome, ScoringConfig
from dmt_bench.endpoint import Endpoint
from dmt_bench.harness.proxy import ProxyClient
from dmt_bench.harness.rundir import write_atomic
from dmt_bench.sim.calllog import CallLog, LoggingClient
from dmt_bench.sim.records import (
    AuditRecord,
    TurnRecord,
    append_turn,
    audit_path,
    read_audit,
)
from dmt_bench.sim.stream import StreamTurn
from dmt_proxy.errors import ConfigError, RunInterrupted
from dmt_proxy.policy import Mode

DIB_RETRIES = 2
"""Extra rounds for DIB decisions that ended in a transport error."""


class LoopState(TypedDict):
    t: int
    audited: list[int]


class RunStopped(RunInterrupted):
    """An upstream failed after retries; the run can be resumed from its checkpoint."""


@dataclass
class Thread:
    """One condition of one memory architecture: who it is and where it writes."""

    arch: str
    condition: str
    mode: Mode
    user: str
    dir: Path

    @property
    def thread_id(self) -> str:
        return f"{self.arch}/{self.condition}"


@dataclass
class LoopDeps:
    """What the nodes need (built once per thread by the runner)."""

    proxy: ProxyClient
    model: str
    """The agent model name as the proxy expects it."""
    stream: Sequence[StreamTurn]
    checkpoints: Sequence[int]
    samples: Sequence[Sample]
    scoring: ScoringConfig
    log: CallLog
    max_tokens: int
    temperature: float
    seed: int
    dib_concurrency: int
    request_timeout_s: float
    max_retries: int
    drain_timeout_s: float
    t0_cache: Path | None = None
    """Where the shared t=0 audit of this SSP setting lives (None: no sharing)."""
    advance: Callable[[int], None] = lambda n: None


def _reply_of(text: str) -> str:
    _, sep, after = text.partition("\nAssistant: ")
    return after if sep else ""


def _find(memories: Sequence[dict[str, Any]], prompt: str) -> dict[str, Any] | None:
    hits = [m for m in memories if prompt in str(m.get("text", ""))]
    return hits[-1] if hits else None


async def _chat(thread: Thread, deps: LoopDeps, prompt: str, t: int) -> tuple[str, float]:
    client = openai.AsyncOpenAI(
        base_url=deps.proxy.base_url,
        api_key="dmt-bench-sim",
        timeout=deps.request_timeout_s,
        max_retries=deps.max_retries,
        default_headers={"X-DMT-User": thread.user, "X-DMT-Mode": thread.mode.value},
    )
    logged = LoggingClient(client, deps.log.bind(t=t), "agent")
    started = time.perf_counter()
    try:
        completion = await logged.chat.completions.create(
            model=deps.model,
            messages=[{"role": "user", "content": prompt}],
            max_tokens=deps.max_tokens,
            temperature=deps.temperature,
            seed=deps.seed,
        )
    except openai.BadRequestError as exc:
        raise ConfigError(
            f"the proxy rejected turn {t} of {thread.thread_id}: {exc.message}"
        ) from exc
    except openai.APIError as exc:
        raise RunStopped(
            f"turn {t} of {thread.thread_id} failed after {deps.max_retries} retries: {exc}",
            upstream=deps.proxy.base_url,
        ) from exc
    finally:
        await logged.close()
    text = completion.choices[0].message.content if completion.choices else ""
    return text or "", time.perf_counter() - started


async def run_turn(thread: Thread, deps: LoopDeps, t: int) -> TurnRecord:
    """Day ``t`` (1-based): ask, wait for the write to settle, record."""
    turn = deps.stream[t - 1]
    await deps.proxy.wait_drained(deps.drain_timeout_s)
    existing = _find(await deps.proxy.memories(thread.user), turn.prompt)
    if existing is not None:
        reply, latency, recovered = _reply_of(str(existing.get("text", ""))), 0.0, True
    else:
        reply, latency = await _chat(thread, deps, turn.prompt, t)
        recovered = False
    drain = await deps.proxy.wait_drained(deps.drain_timeout_s)
    stored = _find(await deps.proxy.memories(thread.user), turn.prompt)
    status = str(stored["audit_status"]) if stored else None
    tag = stored.get("tag") if stored else None
    deps.log.write(
        role="audit",
        t=t,
        outcome=status or "not_stored",
        tag=tag,
        injected=turn.injected,
        domain=turn.domain,
    )
    record = TurnRecord(
        t=t,
        question_id=turn.question_id,
        injected=turn.injected,
        domain=turn.domain,
        strategy=turn.strategy.value if turn.strategy else None,
        reply=reply[:2000],
        latency_s=round(latency, 3),
        memory_status=status,
        tag=tag,
        recovered=recovered,
        drain_s=round(drain, 3),
    )
    append_turn(thread.dir, record)
    deps.advance(1)
    return record


async def _decide(
    samples: Sequence[Sample], endpoint: Endpoint, deps: LoopDeps, t: int
) -> tuple[list[DecisionResult], ScoringConfig]:
    client = LoggingClient(endpoint.client(), deps.log.bind(t=t), "dib", lambda: deps.advance(1))
    try:
        results, scoring = await run_with_retries(
            samples, endpoint, deps.scoring, client=client, retries=DIB_RETRIES
        )
    finally:
        await client.close()
    errors = [r for r in results if r.outcome is Outcome.ERROR]
    if errors:
        raise RunStopped(
            f"{len(errors)} DIB decision(s) at t={t} failed after {DIB_RETRIES} retries "
            f"(first: {errors[0].reason})",
            upstream=endpoint.base_url,
        )
    return results, scoring


async def run_audit(thread: Thread, deps: LoopDeps, t: int) -> AuditRecord:
    """Checkpoint ``t``: the DIB sample in retrieve-only mode."""
    target = audit_path(thread.dir, t)
    if (done := read_audit(target)) is not None:
        # Written just before a crash, ahead of the checkpoint: read-only, so not redone.
        deps.advance(len(deps.samples))
        return done
    await deps.proxy.wait_drained(deps.drain_timeout_s)
    memories = len(await deps.proxy.memories(thread.user))
    if t == 0 and memories:
        raise ConfigError(
            f"user {thread.user} already holds {memories} memories at t=0; "
            "each condition must start empty (use a new run directory)"
        )
    shared = deps.t0_cache if t == 0 else None
    if shared is not None and (cached := read_audit(shared)) is not None:
        record = cached.model_copy(
            update={"shared_from": str(shared.parent.name + "/" + shared.name)}
        )
        write_atomic(target, record.model_dump_json())
        deps.advance(len(deps.samples))
        return record
    endpoint = Endpoint(
        base_url=deps.proxy.base_url,
        model=deps.model,
        api_key="dmt-bench-sim",
        user=thread.user,
        memory="read-only",
        mode=thread.mode.value,
        timeout_s=deps.request_timeout_s,
        concurrency=deps.dib_concurrency,
    )
    started = time.perf_counter()
    results, scoring = await _decide(deps.samples, endpoint, deps, t)
    record = AuditRecord(
        t=t,
        memories=memories,
        scoring=scoring,
        elapsed_s=round(time.perf_counter() - started, 3),
        results=results,
    )
    write_atomic(target, record.model_dump_json())
    if shared is not None:
        shared.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, shared)
    return record


def build_graph(thread: Thread, deps: LoopDeps, checkpointer: Any) -> Any:
    """The compiled LangGraph loop for ``thread``."""
    from langgraph.graph import END, START, StateGraph

    turns = len(deps.stream)
    points = set(deps.checkpoints)

    def route(state: LoopState) -> str:
        if state["t"] in points and state["t"] not in state["audited"]:
            return "audit"
        return "turn" if state["t"] < turns else END

    async def audit_node(state: LoopState) -> dict[str, Any]:
        await run_audit(thread, deps, state["t"])
        return {"audited": [*state["audited"], state["t"]]}

    async def turn_node(state: LoopState) -> dict[str, Any]:
        await run_turn(thread, deps, state["t"] + 1)
        return {"t": state["t"] + 1}

    builder: Any = StateGraph(LoopState)
    builder.add_node("audit", audit_node)
    builder.add_node("turn", turn_node)
    targets = ["audit", "turn", END]
    builder.add_conditional_edges(START, route, targets)
    builder.add_conditional_edges("audit", route, targets)
    builder.add_conditional_edges("turn", route, targets)
    return builder.compile(checkpointer=checkpointer)


async def run_thread(thread: Thread, deps: LoopDeps, checkpointer: Any) -> LoopState:
    """Run ``thread`` to the end, starting fresh or resuming its checkpoint."""
    graph = build_graph(thread, deps, checkpointer)
    config = {
        "configurable": {"thread_id": thread.thread_id},
        "recursion_limit": 2 * (len(deps.stream) + len(deps.checkpoints)) + 10,
    }
    snapshot = await graph.aget_state(config)
    if not snapshot.values:
        state = await graph.ainvoke({"t": 0, "audited": []}, config)
    elif snapshot.next:
        state = await graph.ainvoke(None, config)
    else:
        state = snapshot.values
    return LoopState(t=int(state["t"]), audited=list(state["audited"]))
