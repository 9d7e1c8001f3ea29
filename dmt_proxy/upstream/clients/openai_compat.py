"""Direct HTTP passthrough for OpenAI-compatible upstreams (llama-server, vLLM, ...).

litellm costs ~7 ms of CPU per call on this class of machine (profiled: its
logging wrapper, dispatch and the openai SDK it drives), against ~0.8 ms for a
plain pooled httpx request. For routes that already speak the OpenAI wire format
(an ``api_base`` plus an ``openai/`` or ``hosted_vllm/`` model), the proxy sends
the request itself on one shared connection pool; every other provider goes
through litellm, which translates formats (the ``auto`` upstream client).
``DMT_UPSTREAM_CLIENT=litellm`` sends everything through litellm;
``DMT_UPSTREAM_CLIENT=openai-compat`` everything through this path, so litellm is
never imported and only endpoints with an OpenAI-compatible address are served.

Replies are parsed straight from the response bytes into the typed models
(``ChatCompletion``, ``ChatCompletionChunk``): pydantic-core parses and validates in
one pass. With the typed dump on the way out (``wire_json``) a stream chunk costs
~6.5 us, against ~8 us for the ``json.loads`` + ``json.dumps`` of plain dicts it
replaced (a llama-server chunk with its extra fields, measured on this machine).

Retries: the endpoint's ``max_retries`` (``DMT_UPSTREAM_MAX_RETRIES``) extra attempts, as
litellm's ``num_retries`` does on its path, for server errors, timeouts, dropped
connections and rate limits; never for other 4xx (the request itself is wrong) and,
for streams, only before the first chunk (after it the client has seen output).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
from pydantic import ValidationError

from dmt_proxy.errors import UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, reply_problem
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import UpstreamCall
from dmt_proxy.upstream.clients import ClientPlugin, register_client

_MAX_LINES_AFTER_DONE = 16
"""Lines read (and ignored) after ``data: [DONE]`` before the stream is dropped instead."""


def _upstream_message(response: httpx.Response) -> str:
    try:
        body = response.json()
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return response.text[:500] or response.reason_phrase


def retryable(exc: UpstreamError) -> bool:
    """Whether another attempt can help: everything but a 4xx other than 429."""
    return not isinstance(exc, UpstreamRejected) or exc.status_code == 429


def retry_delay_s(attempt: int) -> float:
    """Pause after failed attempt ``attempt`` (0-based): 0.25 s doubling, capped at 2 s."""
    return float(min(2.0, 0.25 * 2 ** min(attempt, 10)))


@register_client("openai-compat")
class OpenAICompatChatModel(ClientPlugin):
    """Forwards calls to ``{api_base}/chat/completions`` over a shared httpx pool."""

    provider_models: ClassVar[bool] = False

    def __init__(
        self, *, max_connections: int = 512, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client = httpx.AsyncClient(limits=limits, timeout=None, transport=transport)

    @classmethod
    def from_config(cls, settings: Settings) -> OpenAICompatChatModel:
        """A client with its own connection pool (nothing in the settings tunes it yet)."""
        return cls()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    @staticmethod
    def _check_reachable(call: UpstreamCall) -> None:
        # Only reachable when this client is the only one (DMT_UPSTREAM_CLIENT=openai-compat):
        # ``auto`` never sends such endpoints here.
        if not call.endpoint.openai_compatible:
            raise UpstreamError(
                f"upstream {call.where} is not OpenAI-compatible (it needs an api_base and an "
                "openai/ or hosted_vllm/ model name); the openai-compat client cannot reach it, "
                "DMT_UPSTREAM_CLIENT=auto or litellm can",
                upstream=call.where,
            )

    @staticmethod
    def _request(call: UpstreamCall, *, stream: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
        endpoint = call.endpoint
        params = dict(call.params)
        extra = params.pop("extra_body", None) or {}
        body: dict[str, Any] = {
            "model": endpoint.model.split("/", 1)[1],
            "messages": call.wire_messages(),
            **params,
            **extra,
            "stream": stream,
        }
        headers = {"authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
        url = f"{(endpoint.api_base or '').rstrip('/')}/chat/completions"
        return url, body, headers

    def _error(self, call: UpstreamCall, exc: Exception | None = None,
               response: httpx.Response | None = None) -> UpstreamError:  # fmt: skip
        where = call.where
        if response is not None:
            status = response.status_code
            message = _upstream_message(response)
            if status in (400, 404, 413, 422, 429):
                return UpstreamRejected(
                    f"upstream {where} rejected the request ({status}): {message}",
                    upstream=where,
                    status_code=400 if status in (413, 422) else status,
                )
            return UpstreamError(f"upstream {where} failed ({status}): {message}", upstream=where)
        if isinstance(exc, httpx.TimeoutException):
            return UpstreamTimeout(
                f"upstream {where} timed out after {call.endpoint.timeout_s:.0f}s", upstream=where
            )
        kind = type(exc).__name__ if exc else "error"
        return UpstreamError(f"upstream {where} is unreachable ({kind}: {exc})", upstream=where)

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """One completion, retried as the endpoint allows."""
        self._check_reachable(call)
        attempt = 0
        while True:
            try:
                return await self._complete_once(call)
            except UpstreamError as exc:
                if attempt >= call.endpoint.max_retries or not retryable(exc):
                    raise
            await asyncio.sleep(retry_delay_s(attempt))
            attempt += 1

    async def _complete_once(self, call: UpstreamCall) -> ChatCompletion:
        url, body, headers = self._request(call, stream=False)
        try:
            response = await self._client.post(
                url, json=body, headers=headers, timeout=call.endpoint.timeout_s
            )
        except httpx.HTTPError as exc:
            raise self._error(call, exc) from exc
        if response.status_code != 200:
            raise self._error(call, response=response)
        try:
            return ChatCompletion.model_validate_json(response.content)
        except ValidationError as exc:
            raise UpstreamError(f"upstream {call.where} sent a reply that is not a chat "
                                f"completion: {reply_problem(exc)}", upstream=call.where) from exc  # fmt: skip

    async def _open_stream(self, call: UpstreamCall) -> httpx.Response:
        """Send the request; the response once its status is 200 (retried before that)."""
        self._check_reachable(call)
        url, body, headers = self._request(call, stream=True)
        attempt = 0
        while True:
            request = self._client.build_request("POST", url, json=body, headers=headers,
                                                 timeout=call.endpoint.timeout_s)  # fmt: skip
            try:
                response = await self._client.send(request, stream=True)
            except httpx.HTTPError as exc:
                error = self._error(call, exc)
            else:
                if response.status_code == 200:
                    return response
                try:
                    await response.aread()
                    error = self._error(call, response=response)
                except httpx.HTTPError as exc:
                    error = self._error(call, exc)
                finally:
                    await response.aclose()
            if attempt >= call.endpoint.max_retries or not retryable(error):
                raise error
            await asyncio.sleep(retry_delay_s(attempt))
            attempt += 1

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """The upstream's chunks; an error when the stream fails or ends without [DONE]."""
        response = await self._open_stream(call)
        try:
            done = False
            after_done = 0
            async for line in response.aiter_lines():
                if done:
                    # Read on to the end of the body so the connection goes back to the pool:
                    # stopping at [DONE] closed it, and every stream paid a new TCP connect
                    # (profile: ~25 % of the proxy's CPU at 64 streams). Bounded, in case an
                    # upstream keeps talking after [DONE].
                    after_done += 1
                    if after_done > _MAX_LINES_AFTER_DONE:
                        break
                    continue
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    continue
                try:
                    chunk = ChatCompletionChunk.model_validate_json(payload)
                except ValidationError as exc:
                    raise UpstreamError(f"upstream {call.where} sent a malformed stream chunk: "
                                        f"{reply_problem(exc)}", upstream=call.where) from exc  # fmt: skip
                error = chunk.model_extra.get("error") if chunk.model_extra else None
                if error is not None:
                    raise UpstreamError(f"upstream {call.where} failed mid-stream: {error}",
                                        upstream=call.where)  # fmt: skip
                yield chunk
            if not done:
                raise UpstreamError(f"upstream {call.where} ended the stream without [DONE] "
                                    "(truncated)", upstream=call.where)  # fmt: skip
        except httpx.HTTPError as exc:
            raise self._error(call, exc) from exc
        finally:
            # Closing the response drops the connection, which stops llama-server's generation.
            await response.aclose()
