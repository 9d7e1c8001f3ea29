"""Assemble the memory service from settings and policy: backend, outbox, auditor, worker."""

from __future__ import annotations

from dataclasses import dataclass

from dmt_proxy.audit.auditor import LLMAuditor
from dmt_proxy.audit.first_stage import EmbeddingFirstStage
from dmt_proxy.audit.outbox import Outbox
from dmt_proxy.audit.service import MemoryPipeline
from dmt_proxy.audit.worker import OutboxWorker
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.memory.registry import open_policy_backend
from dmt_proxy.metrics import Metrics
from dmt_proxy.policy import Policy
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import ChatModel
from dmt_proxy.upstream.registry import ModelRegistry


@dataclass
class MemoryStack:
    """Everything the memory side owns, so the app can start and stop it as one."""

    service: MemoryPipeline
    worker: OutboxWorker
    backend: MemoryBackend
    outbox: Outbox

    def start(self) -> None:
        self.worker.start()

    async def aclose(self) -> None:
        await self.worker.stop()
        await self.outbox.aclose()
        await self.backend.close()


def build_auditor(policy: Policy, registry: ModelRegistry, chat: ChatModel) -> LLMAuditor:
    """The LLM auditor configured by ``policy.audit`` (its model resolved like any request's)."""
    endpoint = registry.resolve(policy.audit.auditor_model)
    endpoint = endpoint.with_limits(timeout_s=policy.audit.timeout_s)
    # Audit metrics are counted by the worker (once per memory, whatever the auditor).
    return LLMAuditor(chat, endpoint, prompt_version=policy.audit.auditor_prompt,
                      policy=policy.audit)  # fmt: skip


async def build_memory_stack(
    settings: Settings,
    policy: Policy,
    registry: ModelRegistry,
    chat: ChatModel,
    metrics: Metrics,
    *,
    backend: MemoryBackend | None = None,
    auditor: object | None = None,
) -> MemoryStack:
    """Build (not start) the memory stack. ``backend``/``auditor`` override for tests."""
    name = policy.memory.backend
    if backend is None:
        backend = await open_policy_backend(settings, policy, registry, chat)
    outbox = Outbox(settings.state_dir / "outbox.sqlite3")
    first_stage = None
    if policy.audit.first_stage == "embedding":
        from dmt_proxy.embedder import LocalEmbedder

        threshold = policy.audit.first_stage_threshold
        extra = {} if threshold is None else {"threshold": threshold}
        first_stage = EmbeddingFirstStage(LocalEmbedder(), metrics=metrics, **extra)
    worker = OutboxWorker(
        outbox=outbox,
        backend=backend,
        backend_name=name,
        auditor=auditor if auditor is not None else build_auditor(policy, registry, chat),  # type: ignore[arg-type]
        policy=policy.audit,
        metrics=metrics,
        first_stage=first_stage,
    )
    service = MemoryPipeline(backend=backend, backend_name=name, outbox=outbox, worker=worker,
                             policy=policy, metrics=metrics)  # fmt: skip
    return MemoryStack(service=service, worker=worker, backend=backend, outbox=outbox)
