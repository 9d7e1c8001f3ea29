"""Embeddings, routed like chat: the embedded MiniLM, OpenAI-compatible servers, litellm.

A model name is resolved in this order:

* ``local/all-minilm-l6-v2`` or ``all-minilm-l6-v2``: the all-MiniLM-L6-v2 sentence
  embedder that ships with the memory extra (384 dimensions, unit length), run in
  the proxy process, so an offline app embeds through the same base URL it chats on;
* any name the chat registry knows (policy aliases, ``provider/model`` names):
  sent as they are to an OpenAI-compatible ``api_base`` (``/embeddings``), or
  through ``litellm.aembedding`` (imported on first use) for other providers and
  for every route with ``DMT_UPSTREAM_CLIENT=litellm``, as chat does.

A chat-only model is a 400 that lists the embedding models, before any upstream
call for the embedded chat models (their llama-servers run without embeddings) and
in place of the 501 that an OpenAI-compatible chat-only server answers. The status
follows Azure OpenAI, which answers a chat deployment on its embeddings route with
a 400 ``OperationNotSupported`` ("The embeddings operation does not work with the
specified model"); the model exists, so it is not a 404 ``model_not_found``.

The upstream is always asked for floats; ``encoding_format: "base64"`` is applied
here (little-endian float32, as OpenAI sends it), so every route answers both.
Token arrays as ``input`` are refused: the proxy cannot know the upstream's tokenizer.
"""

from __future__ import annotations

import asyncio
import base64
import sys
from array import array
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dmt_proxy.embedder import TextEmbedder
from dmt_proxy.errors import InvalidRequest, UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.clients.openai_compat import _upstream_message, retry_delay_s, retryable
from dmt_proxy.upstream.models import ModelRegistry

LOCAL_EMBEDDING_MODEL = "all-minilm-l6-v2"
LOCAL_EMBEDDING_NAMES = (f"local/{LOCAL_EMBEDDING_MODEL}", LOCAL_EMBEDDING_MODEL)
LOCAL_EMBEDDING_DIMS = 384
CHAT_ONLY_CODE = "model_not_supported"
MAX_INPUTS = 2048
"""Texts in one request, as OpenAI allows."""


class EmbeddingRequest(BaseModel):
    """``POST /v1/embeddings`` body; fields the proxy cannot honour are refused."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    input: str | list[str]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(default=None, ge=1)
    user: str | None = None
    """Passed to the upstream (abuse monitoring); embeddings write no memory."""

    @field_validator("input", mode="before")
    @classmethod
    def _texts_only(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("must contain at least one text")
            if len(value) > MAX_INPUTS:
                raise ValueError(f"at most {MAX_INPUTS} texts per request")
            if any(isinstance(v, int | list) for v in value):
                raise ValueError("token arrays are not supported; send text")
            if any(isinstance(v, str) and not v for v in value):
                raise ValueError("texts must not be empty")
        elif value == "":
            raise ValueError("must not be empty")
        return value

    def texts(self) -> list[str]:
        """``input`` as a list of texts."""
        return [self.input] if isinstance(self.input, str) else list(self.input)


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str
    """Floats, or with ``encoding_format: "base64"`` little-endian float32 bytes in base64."""


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    """The OpenAI embeddings reply."""

    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage


@dataclass(frozen=True)
class Vectors:
    """What an embedding backend returns: one vector per text, and the tokens it read."""

    vectors: list[list[float]]
    prompt_tokens: int


def encode(vector: list[float], encoding_format: str) -> list[float] | str:
    """``vector`` as OpenAI sends it: floats, or base64 of little-endian float32."""
    if encoding_format == "float":
        return vector
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return base64.b64encode(packed.tobytes()).decode("ascii")


class EmbeddingRouter:
    """Serves embedding requests for every name the proxy knows; ``aclose`` when done."""

    def __init__(
        self,
        registry: ModelRegistry,
        *,
        local: TextEmbedder | None = None,
        via_litellm: bool = False,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``local`` defaults to the shipped MiniLM, loaded on the first local request;
        ``via_litellm`` sends every upstream call through litellm (``DMT_UPSTREAM_CLIENT``)."""
        self._registry = registry
        self._via_litellm = via_litellm
        self._local = local
        self._client = httpx.AsyncClient(timeout=None, transport=transport)
        self._lock = asyncio.Lock()

    @property
    def names(self) -> list[str]:
        """The embedding-only model names (listed by ``/v1/models``)."""
        return list(LOCAL_EMBEDDING_NAMES)

    def chat_only(self, model: str, detail: str = "") -> InvalidRequest:
        """The 400 for an embeddings request naming a chat-only model; it lists the embedders."""
        return InvalidRequest(
            f"model '{model}' is a chat model and does not serve embeddings{detail}. Embedding "
            f"models: {', '.join(self.names)}; a provider's embedding model (for example "
            "'openai/text-embedding-3-small') is sent to that provider.",
            param="model", code=CHAT_ONLY_CODE,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def embed(self, req: EmbeddingRequest) -> EmbeddingResponse:
        """Embed ``req.input`` with the model it names."""
        texts = req.texts()
        if req.model in LOCAL_EMBEDDING_NAMES:
            result = await self._embed_local(texts, req.dimensions)
        else:
            await self._registry.ensure_providers(req.model)
            endpoint = self._registry.resolve(req.model)
            if endpoint.kind == "local":
                raise self.chat_only(req.model)
            if endpoint.openai_compatible and not self._via_litellm:
                result = await self._embed_direct(endpoint, texts, req)
            else:
                result = await _embed_litellm(endpoint, texts, req)
        data = [Embedding(index=i, embedding=encode(v, req.encoding_format))
                for i, v in enumerate(result.vectors)]  # fmt: skip
        usage = EmbeddingUsage(
            prompt_tokens=result.prompt_tokens, total_tokens=result.prompt_tokens
        )
        return EmbeddingResponse(data=data, model=req.model, usage=usage)

    async def _embed_local(self, texts: list[str], dimensions: int | None) -> Vectors:
        if dimensions is not None and dimensions != LOCAL_EMBEDDING_DIMS:
            raise InvalidRequest(f"{LOCAL_EMBEDDING_MODEL} has {LOCAL_EMBEDDING_DIMS} dimensions "
                                 "and cannot shorten them", param="dimensions")  # fmt: skip
        async with self._lock:  # one load, and one CPU-bound batch at a time
            if self._local is None:
                from dmt_proxy.embedder import LocalEmbedder

                self._local = LocalEmbedder()
            local = self._local
            vectors = await asyncio.to_thread(local.embed, texts)
            tokens = await asyncio.to_thread(local.count_tokens, texts)
        return Vectors(vectors=vectors, prompt_tokens=tokens)

    async def _embed_direct(
        self, endpoint: ModelEndpoint, texts: list[str], req: EmbeddingRequest
    ) -> Vectors:
        body: dict[str, Any] = {"model": endpoint.model.split("/", 1)[1], "input": texts,
                                "encoding_format": "float"}  # fmt: skip
        if req.dimensions is not None:
            body["dimensions"] = req.dimensions
        if req.user is not None:
            body["user"] = req.user
        headers = {"authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        url = f"{(endpoint.api_base or '').rstrip('/')}/embeddings"
        where = endpoint.label
        attempt = 0
        while True:
            try:
                response = await self._client.post(url, json=body, headers=headers,
                                                   timeout=endpoint.timeout_s)  # fmt: skip
                if response.status_code == 200:
                    return _vectors(response.json(), len(texts), where)
                if response.status_code == 501:  # a chat-only server (llama-server without them)
                    detail = f" (upstream {where}: {_upstream_message(response)})"
                    raise self.chat_only(req.model, detail)
                error = _status_error(response, where)
            except httpx.TimeoutException:
                error = UpstreamTimeout(f"upstream {where} timed out after "
                                        f"{endpoint.timeout_s:.0f}s", upstream=where)  # fmt: skip
            except httpx.HTTPError as exc:
                error = UpstreamError(f"upstream {where} is unreachable ({type(exc).__name__}: "
                                      f"{exc})", upstream=where)  # fmt: skip
            except ValueError as exc:  # not JSON
                error = UpstreamError(f"upstream {where} sent a reply that is not JSON: {exc}",
                                      upstream=where)  # fmt: skip
            if attempt >= endpoint.max_retries or not retryable(error):
                raise error
            await asyncio.sleep(retry_delay_s(attempt))
            attempt += 1


def _status_error(response: httpx.Response, where: str) -> UpstreamError:
    status = response.status_code
    message = _upstream_message(response)
    if status in (400, 404, 413, 422, 429):
        return UpstreamRejected(f"upstream {where} rejected the request ({status}): {message}",
                                upstream=where, status_code=400 if status in (413, 422) else status)  # fmt: skip
    return UpstreamError(f"upstream {where} failed ({status}): {message}", upstream=where)


class _UpstreamVector(BaseModel):
    model_config = ConfigDict(extra="allow")
    index: int = 0
    embedding: list[float]


class _UpstreamReply(BaseModel):
    model_config = ConfigDict(extra="allow")
    data: list[_UpstreamVector]
    usage: dict[str, Any] | None = None


def _vectors(reply: Any, expected: int, where: str) -> Vectors:
    """The vectors of an OpenAI-shaped reply, in input order, checked."""
    try:
        parsed = _UpstreamReply.model_validate(reply)
    except ValidationError as exc:
        raise UpstreamError(f"upstream {where} sent a reply that is not an embedding list: "
                            f"{exc.errors()[0]['msg']}", upstream=where) from exc  # fmt: skip
    if len(parsed.data) != expected:
        raise UpstreamError(f"upstream {where} sent {len(parsed.data)} vectors for {expected} "
                            "texts", upstream=where)  # fmt: skip
    ordered = sorted(parsed.data, key=lambda d: d.index)
    tokens = (parsed.usage or {}).get("prompt_tokens") or 0
    return Vectors(vectors=[d.embedding for d in ordered], prompt_tokens=int(tokens))


async def _embed_litellm(
    endpoint: ModelEndpoint, texts: list[str], req: EmbeddingRequest
) -> Vectors:
    """Embed through ``litellm.aembedding`` (providers that do not speak OpenAI's wire format)."""
    from dmt_proxy.upstream.clients.litellm_model import LiteLLMChatModel

    chat = LiteLLMChatModel()  # only for its litellm import and its error mapping
    kwargs: dict[str, Any] = {"model": endpoint.model, "input": texts,
                              "timeout": endpoint.timeout_s, "num_retries": endpoint.max_retries}  # fmt: skip
    if endpoint.api_base:
        kwargs["api_base"] = endpoint.api_base
    if endpoint.api_key:
        kwargs["api_key"] = endpoint.api_key
    if req.dimensions is not None:
        kwargs["dimensions"] = req.dimensions
    if req.user is not None:
        kwargs["user"] = req.user
    try:
        reply = await chat._litellm.aembedding(**kwargs)
    except Exception as exc:
        raise chat._map_error(exc, UpstreamCall(endpoint, messages=[])) from exc
    dumped = reply.model_dump() if hasattr(reply, "model_dump") else dict(reply)
    return _vectors(dumped, len(texts), endpoint.label)
