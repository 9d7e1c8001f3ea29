"""Every caller reaches models through ``upstream.factory``: one name, one endpoint.

The app, ``dmt-proxy audit-backfill``, the simulation's generator and
``dmt-bench auditor-eval`` each resolve the same names here and must agree on where
a model is, under which name and with which key (their timeouts differ by design).
The chat model is the shipped scripted one where a call is made (a fake: these tests
are about what is called, not about answers).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from dmt_bench.auditor_eval.cli import register, resolve_endpoint
from dmt_bench.sim.config import parse_config
from dmt_bench.sim.runner import generator_call, generator_chat
from dmt_proxy.api import create_app
from dmt_proxy.errors import ConfigError, ModelNotFound, UpstreamError
from dmt_proxy.memory.assembly import backfill_store
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.policy import Policy, parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.clients.auto import DispatchingChatModel
from dmt_proxy.upstream.clients.litellm_model import LiteLLMChatModel
from dmt_proxy.upstream.clients.openai_compat import OpenAICompatChatModel
from dmt_proxy.upstream.factory import (
    build_chat_model,
    build_registry,
    declared_endpoint,
    needs_litellm,
    open_upstream,
)
from dmt_proxy.upstream.local_tools import LocalToolsChatModel

HOSTED = {"model": "openai/gpt-x", "api_base": "http://hosted.invalid/v1", "api_key_env": "HK"}
POLICY = {
    "version": 1,
    "memory": {"backend": "memory"},
    # first_stage off: every memory reaches the scripted upstream (the first stage is on by default).
    "audit": {"auditor_model": "local/qwen2.5-1.5b", "timeout_s": 42, "first_stage": "off"},
    "models": {"hosted": HOSTED},
}
VERDICT = json.dumps({"rationale": "r", "bias_detected": False, "bias_type": None,
                      "target_group": "", "tendency": "", "score": 0.0})  # fmt: skip


def reach(endpoint: ModelEndpoint) -> tuple[str, str | None, str | None]:
    """Where and how a model is reached, without the caller's own limits."""
    return endpoint.model, endpoint.api_base, endpoint.api_key


def eval_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="command"))
    return parser.parse_args(["auditor-eval", *argv])


@pytest.fixture
def settings(state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("HK", "hosted-key")
    for name in ("DMT_MODELS_PORT_BASE", "DMT_MODELS_HOST", "DMT_UPSTREAM_CLIENT"):
        monkeypatch.delenv(name, raising=False)
    return Settings.from_env(state_dir=state_dir, upstream_timeout_s=77)


@pytest.fixture
async def app(settings: Settings) -> AsyncIterator[FastAPI]:
    app = create_app(settings, policy=parse_policy(POLICY), upstream=ScriptedChatModel([VERDICT]))
    async with app.router.lifespan_context(app):
        yield app


async def test_app_cli_simulation_and_auditor_eval_agree_on_endpoints(
    app: FastAPI, settings: Settings
) -> None:
    served = app.state.upstream.resolve("local/qwen2.5-1.5b")
    assert served.name == "local/qwen2.5-1.5b" and served.kind == "local"
    assert (served.timeout_s, served.max_retries) == (77, settings.upstream_max_retries)

    sim = parse_config({"models": {"generator": "qwen2.5-1.5b"}})
    generator = generator_call(sim, Settings.from_env()).endpoint
    assert generator.name == served.name and reach(generator) == reach(served)
    assert generator.timeout_s == sim.execution.request_timeout_s

    evaluated = resolve_endpoint(
        eval_args("--model", "local/qwen2.5-1.5b", "--timeout", "9"), Settings.from_env()
    )
    assert evaluated.name == served.name and reach(evaluated) == reach(served)
    assert evaluated.timeout_s == 9

    # A hosted model declared in the policy, in a simulation config and on the command line.
    alias = app.state.upstream.resolve("hosted")
    assert reach(alias) == ("openai/gpt-x", "http://hosted.invalid/v1", "hosted-key")
    sim = parse_config({"models": {"generator": HOSTED}})
    assert reach(generator_call(sim, Settings.from_env()).endpoint) == reach(alias)
    flags = eval_args("--model", "openai/gpt-x", "--base-url", HOSTED["api_base"],
                      "--api-key-env", "HK")  # fmt: skip
    assert reach(resolve_endpoint(flags, Settings.from_env())) == reach(alias)


async def test_backfill_audits_with_the_apps_auditor_endpoint(
    app: FastAPI, settings: Settings
) -> None:
    # The JSON verdict path: one call (the log-prob path would ask twice of this fake).
    policy = parse_policy({**POLICY, "audit": {**POLICY["audit"], "verdict": "json"}})
    expected = app.state.upstream.resolve(policy.audit.auditor_model)
    backend = await create_backend("memory", BackendConfig(state_dir=settings.state_dir))
    scope = Scope(user="u1")
    await backend.write(scope, MemoryRecord(id="m0", scope=scope, text="hello",
                                            audit_status=AuditStatus.UNAUDITED))  # fmt: skip
    await backend.close()  # persists its snapshot, which the backfill reads
    chat = ScriptedChatModel([VERDICT])
    report = await backfill_store(settings, policy, ["u1"], chat=chat)
    assert report.audited == 1
    (call,) = chat.calls
    assert call.endpoint == expected.with_limits(timeout_s=42)  # the policy's audit timeout


async def test_the_production_chat_model_is_the_same_everywhere(settings: Settings) -> None:
    built = build_chat_model(settings)
    assert isinstance(built, DispatchingChatModel)
    assert isinstance(built.general, LiteLLMChatModel)
    generator = generator_chat(Settings.from_env())  # the CLI builds them from the environment
    assert type(generator) is type(built)
    await built.aclose()
    await generator.aclose()
    only_litellm = build_chat_model(settings.model_copy(update={"upstream_client": "litellm"}))
    assert isinstance(only_litellm, LiteLLMChatModel)


async def test_open_upstream_keeps_litellm_out_for_local_routes(settings: Settings) -> None:
    local = Policy()
    upstream = await open_upstream(settings, local)
    assert not needs_litellm(settings, local, upstream.registry)
    assert upstream.registry.wants_providers("anthropic/claude-3")  # loaded on first use only
    await upstream.aclose()
    scripted = await open_upstream(settings, local, chat=ScriptedChatModel())
    assert scripted.resolve("anthropic/claude-3").kind == "provider"  # fallback list
    with pytest.raises(ModelNotFound):
        scripted.resolve("nosuchprovider/model")


async def test_the_openai_compat_client_serves_addressed_endpoints_only(
    settings: Settings,
) -> None:
    direct = settings.model_copy(update={"upstream_client": "openai-compat"})
    upstream = await open_upstream(direct, Policy())
    assert isinstance(upstream.owned, OpenAICompatChatModel)
    assert isinstance(upstream.chat, LocalToolsChatModel) and upstream.chat.inner is upstream.owned
    assert not needs_litellm(direct, Policy(), upstream.registry)
    assert upstream.resolve("local/qwen2.5-1.5b").openai_compatible
    with pytest.raises(ModelNotFound):
        upstream.resolve("anthropic/claude-3")  # provider names need litellm
    hosted = UpstreamCall(ModelEndpoint(model="anthropic/claude-3"), messages=[])
    with pytest.raises(UpstreamError, match="not OpenAI-compatible"):
        await upstream.chat.complete(hosted)
    with pytest.raises(UpstreamError, match="not OpenAI-compatible"):
        async for _ in upstream.chat.stream(hosted):
            pass
    await upstream.aclose()
    only_litellm = settings.model_copy(update={"upstream_client": "litellm"})
    registry = build_registry(only_litellm, Policy(), litellm=True)
    assert needs_litellm(only_litellm, Policy(), registry)  # every call goes through litellm


def test_declared_endpoints(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    served = declared_endpoint(settings, "qwen2.5-0.5b", api_base="http://127.0.0.1:9/v1")
    assert (served.model, served.kind) == ("openai/qwen2.5-0.5b", "direct")
    with pytest.raises(ConfigError, match="unknown local model"):
        declared_endpoint(settings, "local/nope")
    with pytest.raises(ConfigError, match="provider prefix"):
        declared_endpoint(settings, "gpt-4o-mini")
    monkeypatch.delenv("HK")
    with pytest.raises(ConfigError, match=r"\$HK is not set"):
        declared_endpoint(settings, "openai/gpt-x", api_key_env="HK")


def test_endpoint_defaults_and_label() -> None:
    endpoint = ModelEndpoint(model="openai/m", api_base="http://h/v1", api_key="secret")
    assert endpoint.name == "openai/m" and endpoint.label == "openai/m at http://h/v1"
    assert endpoint.openai_compatible and "secret" not in repr(endpoint)
    assert not ModelEndpoint(model="anthropic/m", api_base="http://h/v1").openai_compatible
