"""``POST /v1/embeddings``: the embedded MiniLM in-process, OpenAI-compatible upstreams directly.

The local route runs the real shipped all-MiniLM-L6-v2. The direct route is driven
through httpx's own MockTransport (the upstream's HTTP, not our code, is faked);
the openai SDK is the client where the test is about what a client sees.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI, BadRequestError, NotFoundError

from dmt_proxy.api import create_app
from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import InvalidRequest, UpstreamError, UpstreamRejected
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.embeddings import EmbeddingRequest, EmbeddingRouter, encode
from dmt_proxy.upstream.factory import FALLBACK_PROVIDERS
from dmt_proxy.upstream.models import ModelRegistry

TEXTS = ["The cat sat on the mat.", "A feline rested on the rug.", "Quarterly tax filing rules."]
POLICY = {"version": 1, "memory": {"backend": "none"}, "models": {
    "embedder": {"model": "openai/text-embed", "api_base": "http://upstream.test/v1"}}}  # fmt: skip


@pytest.fixture
async def client(state_dir: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings.from_env({}, state_dir=state_dir)
    app = create_app(settings, policy=parse_policy(POLICY), upstream=ScriptedChatModel(["hi"]))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://proxy") as c,
    ):
        yield c


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_local_minilm_through_the_openai_sdk(client: httpx.AsyncClient) -> None:
    sdk = AsyncOpenAI(base_url="http://proxy/v1", api_key="unused", http_client=client)
    # The SDK asks for base64 unless told otherwise, and decodes it: both paths are checked.
    packed = await sdk.embeddings.create(model="all-minilm-l6-v2", input=TEXTS)
    floats = await sdk.embeddings.create(model="local/all-minilm-l6-v2", input=TEXTS,
                                         encoding_format="float")  # fmt: skip
    assert [d.index for d in packed.data] == [0, 1, 2] and packed.model == "all-minilm-l6-v2"
    vectors = [d.embedding for d in floats.data]
    assert all(len(v) == 384 and math.isclose(cosine(v, v), 1.0, abs_tol=1e-4) for v in vectors)
    for a, b in zip(packed.data, floats.data, strict=True):
        assert max(abs(x - y) for x, y in zip(a.embedding, b.embedding, strict=True)) < 1e-6
    # The same vectors the memory backends use; and they mean something.
    assert vectors[0] == pytest.approx(LocalEmbedder().embed([TEXTS[0]])[0], abs=1e-6)
    assert cosine(vectors[0], vectors[1]) > cosine(vectors[0], vectors[2]) + 0.2
    assert floats.usage.prompt_tokens > len(" ".join(TEXTS).split())
    one = await sdk.embeddings.create(model="all-minilm-l6-v2", input="hello",
                                      encoding_format="float")  # fmt: skip
    assert len(one.data) == 1 and len(one.data[0].embedding) == 384


async def test_models_lists_the_embedder_and_legacy_completions_is_refused(
    client: httpx.AsyncClient,
) -> None:
    ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
    assert "all-minilm-l6-v2" in ids and "local/all-minilm-l6-v2" in ids
    sdk = AsyncOpenAI(base_url="http://proxy/v1", api_key="unused", http_client=client)
    with pytest.raises(NotFoundError) as caught:
        await sdk.completions.create(model="qwen2.5-0.5b", prompt="Hello")
    body: Any = caught.value.body
    assert body["code"] == "unsupported_route"
    assert (
        "POST /v1/responses" in body["message"] and "POST /v1/chat/completions" in body["message"]
    )


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"model": "all-minilm-l6-v2", "input": [1, 2, 3]}, "input", "token arrays"),
        ({"model": "all-minilm-l6-v2", "input": []}, "input", "at least one"),
        ({"model": "all-minilm-l6-v2", "input": ["a", ""]}, "input", "empty"),
        ({"model": "all-minilm-l6-v2", "input": "a", "dimensions": 64}, "dimensions", "384"),
        ({"model": "all-minilm-l6-v2", "input": "a", "encoding_format": "int8"},
         "encoding_format", "float"),
        ({"model": "all-minilm-l6-v2", "input": "a", "truncate": True}, "truncate", "Unsupported"),
        ({"input": "a"}, "model", "required"),
    ],
)  # fmt: skip
async def test_bad_embedding_requests_are_400s_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], param: str, words: str
) -> None:
    resp = await client.post("/v1/embeddings", json=body)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["param"] == param and words in error["message"]


async def test_unknown_embedding_model_is_a_404(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/embeddings", json={"model": "nope", "input": "a"})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"


async def test_a_chat_only_model_is_a_400_listing_the_embedding_models(
    client: httpx.AsyncClient,
) -> None:
    sdk = AsyncOpenAI(base_url="http://proxy/v1", api_key="x", http_client=client)
    with pytest.raises(BadRequestError) as caught:
        await sdk.embeddings.create(model="local/qwen2.5-1.5b", input="hello")
    error = caught.value.body
    assert isinstance(error, dict)
    assert (error["param"], error["code"], error["type"]) == (
        "model", "model_not_supported", "invalid_request_error")  # fmt: skip
    assert "local/qwen2.5-1.5b" in error["message"] and "all-minilm-l6-v2" in error["message"]


async def test_an_upstream_that_serves_no_embeddings_is_a_400_not_a_502(tmp_path: Path) -> None:
    # llama-server without --embeddings answers 501; it is not retried.
    sent: list[str] = []

    def chat_only(request: httpx.Request) -> httpx.Response:
        sent.append(str(request.url))
        return httpx.Response(501, json={"error": {"code": 501, "type": "not_supported_error",
                              "message": "This server does not support embeddings."}})  # fmt: skip

    router = router_with(chat_only, tmp_path)
    with pytest.raises(InvalidRequest, match="'embedder' is a chat model") as caught:
        await router.embed(EmbeddingRequest(model="embedder", input="a"))
    await router.aclose()
    assert caught.value.param == "model" and "local/all-minilm-l6-v2" in caught.value.message
    assert len(sent) == 1


def router_with(handler: Any, tmp_path: Path) -> EmbeddingRouter:
    settings = Settings.from_env({}, state_dir=tmp_path)
    registry = ModelRegistry(settings, parse_policy(POLICY), FALLBACK_PROVIDERS)
    return EmbeddingRouter(registry, transport=httpx.MockTransport(handler))


async def test_openai_compatible_upstream_is_called_directly(tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        sent.append({"url": str(request.url), **json.loads(request.content)})
        # Out of order on purpose: the reply is put back in input order.
        data = [{"object": "embedding", "index": i, "embedding": [float(i), 0.5]}
                for i in reversed(range(2))]  # fmt: skip
        return httpx.Response(200, json={"object": "list", "data": data, "model": "text-embed",
                                         "usage": {"prompt_tokens": 7, "total_tokens": 7}})  # fmt: skip

    router = router_with(upstream, tmp_path)
    req = EmbeddingRequest(model="embedder", input=["a", "b"], encoding_format="base64", user="u")
    reply = await router.embed(req)
    await router.aclose()
    assert sent == [{"url": "http://upstream.test/v1/embeddings", "model": "text-embed",
                     "input": ["a", "b"], "encoding_format": "float", "user": "u"}]  # fmt: skip
    assert [d.embedding for d in reply.data] == [encode([0.0, 0.5], "base64"),
                                                 encode([1.0, 0.5], "base64")]  # fmt: skip
    assert (reply.model, reply.usage.prompt_tokens) == ("embedder", 7)


@pytest.mark.parametrize(("status", "error"), [(429, UpstreamRejected), (500, UpstreamError)])
async def test_upstream_embedding_failures_map_like_chat(
    tmp_path: Path, status: int, error: type[Exception]
) -> None:
    router = router_with(lambda _: httpx.Response(status, json={"error": {"message": "no"}}),
                         tmp_path)  # fmt: skip
    with pytest.raises(error, match="no"):
        await router.embed(EmbeddingRequest(model="embedder", input="a"))
    await router.aclose()


def test_request_validation_names_the_problem() -> None:
    with pytest.raises(ValueError, match="token arrays"):
        EmbeddingRequest.model_validate({"model": "m", "input": [[1, 2]]})
    assert EmbeddingRequest(model="m", input="x").texts() == ["x"]
