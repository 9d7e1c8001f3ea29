"""Model names that fit every client: ``local/<name>`` and the bare ``<name>`` both work."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from dmt_proxy.api import create_app
from dmt_proxy.errors import ModelNotFound
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.factory import FALLBACK_PROVIDERS
from dmt_proxy.upstream.local_models import LOCAL_MODELS
from dmt_proxy.upstream.models import ModelRegistry

POLICY = parse_policy({"version": 1, "memory": {"backend": "none"}, "models": {
    "smollm2": {"model": "openai/other", "api_base": "http://127.0.0.1:9/v1"}}})  # fmt: skip


def test_bare_local_names_resolve_to_the_embedded_models(tmp_path: Path) -> None:
    settings = Settings.from_env({}, state_dir=tmp_path)
    registry = ModelRegistry(settings, parse_policy({"version": 1}), FALLBACK_PROVIDERS)
    for name in LOCAL_MODELS:
        bare, prefixed = registry.resolve(name), registry.resolve(f"local/{name}")
        assert (bare.model, bare.api_base, bare.kind) == (
            prefixed.model,
            prefixed.api_base,
            prefixed.kind,
        )
        assert (bare.name, prefixed.name) == (name, f"local/{name}")
        assert {name, f"local/{name}"} <= set(registry.aliases)
    with pytest.raises(ModelNotFound):
        registry.resolve("qwen2.5-7b")


def test_a_policy_alias_wins_over_the_bare_local_name(tmp_path: Path) -> None:
    registry = ModelRegistry(Settings.from_env({}, state_dir=tmp_path), POLICY, FALLBACK_PROVIDERS)
    assert registry.resolve("smollm2").model == "openai/other"
    assert registry.resolve("local/smollm2").model == "openai/smollm2"


@pytest.fixture
async def client(state_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings.from_env({}, state_dir=state_dir)
    app = create_app(settings, policy=parse_policy({"version": 1, "memory": {"backend": "none"}}),
                     upstream=ScriptedChatModel(["hi"]))  # fmt: skip
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c,
    ):
        yield c


async def test_models_lists_both_spellings_and_chat_answers_with_the_name_asked(
    client: httpx.AsyncClient,
) -> None:
    ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
    for name in LOCAL_MODELS:
        assert name in ids and f"local/{name}" in ids
    body = {"model": "qwen2.5-1.5b", "messages": [{"role": "user", "content": "Hi"}]}
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200 and resp.json()["model"] == "qwen2.5-1.5b"
