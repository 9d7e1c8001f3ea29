"""Memory backends with the real local models (llama-server: qwen2.5-0.5b, 1.5b) behind litellm.

What runs: the LangMem-style JSON manager (structured output), langmem's own
tool-calling manager (on qwen2.5-1.5b, through the proxy's local tool-call layer), and the
Letta-style pager's model-written summary. A few calls each; mem0's own
``infer=True`` extraction is not exercised here (40-117 s per write with these
models, see LOCAL_STACK.md).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.memory.backends.langmem_backend import LangMemBackend
from dmt_proxy.memory.backends.letta_backend import LettaPagingBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.upstream.base import ModelEndpoint
from dmt_proxy.upstream.clients.litellm_model import LiteLLMChatModel

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ALICE = Scope(user="alice")
TAG = BiasTag(
    bias_type="age", target_group="older workers", tendency="disfavoring older", score=0.8
)


@pytest.fixture(scope="module")
def llm(local_model_base_url: Callable[[str], str]) -> ModelEndpoint:
    return ModelEndpoint(
        model="openai/qwen2.5-0.5b", api_base=local_model_base_url("qwen2.5-0.5b"),
        api_key="local", timeout_s=600,  # a functional test: a slow shared machine must not fail it
    )  # fmt: skip


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


async def test_json_manager_with_local_model(
    tmp_path: Path, llm: ModelEndpoint, embedder: LocalEmbedder
) -> None:
    config = BackendConfig(
        state_dir=tmp_path,
        embedder=embedder,
        chat=LiteLLMChatModel(),
        llm=llm,
        options={"consolidate": True},
    )
    backend = await create_backend("langmem", config)
    assert isinstance(backend, LangMemBackend) and backend.manager_path == "json"
    first = MemoryRecord.from_interaction(
        ALICE,
        "My dog Rex is a three-year-old beagle and I walk him every morning.",
        "Morning walks are great for beagles.",
    )
    await backend.write(ALICE, first)
    print(f"\njson manager: {backend.stats}", file=sys.stderr)
    assert backend.stats.json_runs + backend.stats.failures == 1
    derived = [r for r in await backend.list(ALICE) if r.metadata.get("kind") == "consolidated"]
    for record in derived:
        print(f"  consolidated: {record.text!r}", file=sys.stderr)
    assert backend.stats.json_runs == 1, "the constrained JSON plan should parse"
    assert derived, "the schema asks for at least one memory"
    await backend.update(ALICE, first.id, audit_status=AuditStatus.TAGGED, tag=TAG)
    for record in derived:
        again = await backend.get(ALICE, record.id)
        assert again is not None and again.tag == TAG
    hits = await backend.search(ALICE, "What breed is my dog?", k=3)
    assert hits and first.id in {h.record.id for h in hits} | {
        s for h in hits for s in h.record.metadata.get("sources", [])
    }
    await backend.close()


async def test_langmem_own_manager_with_local_model(
    tmp_path: Path, local_model_base_url: Callable[[str], str], embedder: LocalEmbedder
) -> None:
    """langmem's own manager on qwen2.5-1.5b: its tool calls come from the proxy's local layer.

    One write, one model call (trustcall's extraction, constrained to a ``Memory`` call).
    This checks the round trip; what the manager chooses to keep is measured in
    benchmarks/perf/langmem_manager.py (the 1.5b sometimes keeps the assistant's reply).
    """
    llm = ModelEndpoint(
        name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b", kind="local", api_key="local",
        api_base=local_model_base_url("qwen2.5-1.5b"), timeout_s=300,
    )  # fmt: skip
    config = BackendConfig(
        state_dir=tmp_path, embedder=embedder, chat=LiteLLMChatModel(), llm=llm,
        options={"consolidate": True, "manager": "langmem"},
    )  # fmt: skip
    backend = await create_backend("langmem", config)
    assert isinstance(backend, LangMemBackend) and backend.manager_path == "langmem"
    record = MemoryRecord.from_interaction(
        ALICE, "I moved to Lyon last month for a nursing job.", "Welcome to Lyon!"
    )
    await backend.write(ALICE, record)
    print(f"\nlangmem manager with qwen2.5-1.5b: {backend.stats}", file=sys.stderr)
    assert backend.stats.failures == 0 and backend.stats.langmem_runs == 1
    derived = [r for r in await backend.list(ALICE) if r.metadata.get("kind") == "consolidated"]
    for memory in derived:
        print(f"  consolidated: {memory.text!r}", file=sys.stderr)
    assert len(derived) == 1 and "lyon" in derived[0].text.lower()
    assert derived[0].metadata["manager"] == "langmem"
    assert derived[0].metadata["sources"] == [record.id]
    await backend.close()


async def test_pager_summary_with_local_model(
    tmp_path: Path, llm: ModelEndpoint, embedder: LocalEmbedder
) -> None:
    config = BackendConfig(
        state_dir=tmp_path,
        embedder=embedder,
        chat=LiteLLMChatModel(),
        llm=llm,
        options={"core_size": 2, "page_size": 2, "summarizer": "model"},
    )
    backend = await create_backend("letta", config)
    assert isinstance(backend, LettaPagingBackend)
    facts = [
        ("My dog Rex is a beagle.", "Beagles are friendly."),
        ("I work night shifts as a nurse in Lyon.", "Night shifts are hard."),
        ("I am allergic to peanuts.", "I will keep that in mind."),
    ]
    for q, a in facts:
        await backend.write(ALICE, MemoryRecord.from_interaction(ALICE, q, a))
    summary = backend.summary(ALICE)
    print(f"\npager: {backend.stats}\n  summary: {summary!r}", file=sys.stderr)
    assert backend.stats.page_outs == 1
    assert summary
    assert backend.stats.model_summaries + backend.stats.model_failures == 1
    hits = await backend.search(ALICE, "What is my dog's name?", k=3)
    assert hits
    await backend.close()
