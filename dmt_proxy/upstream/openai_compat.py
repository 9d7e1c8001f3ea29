"""Direct HTTP passthrough for OpenAI-compatible upstreams (llama-server, vLLM, ...).

litellm costs ~7 ms of CPU per call on this class of machine (profiled: its
logging wrapper, dispatch and the openai SDK it drives), against ~0.8 ms for a
plain pooled httpx request. For routes that already speak the OpenAI wire format
(an ``api_base`` plus an ``openai/`` or ``hosted_vllm/`` model), the proxy sends
the request itself on one shared connection pool; every other provider goes
through litellm, which translates formats. ``DMT_UPSTREAM_CLIENT=litellm`` sends
everything through litellm.

Retries: ``call.max_retries`` (``DMT_UPSTREAM_MAX_RETRIES``) extra attempts, as
litellm's ``num_retries`` does on its path, for server errors, timeouts, dropped
connections and rate limits; never for other 4xx (the request itself is wrong) and,
for streams, only before the first chunk (after it the client has seen output).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

from dmt_proxy.errors import UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.upstream.base import ChatModel, UpstreamCall

_COMPAT_PREFIXES = ("openai/", "hosted_vllm/")
_MAX_LINES_AFTER_DONE = 16
"""Lines read (and ignored) after ``data: [DONE]`` before the stream is dropped instead."""


def compatible_model(model: str, api_base: str | None) -> bool:
    """True when calls to litellm model ``model`` at ``api_base`` can go there as-is."""
    return bool(api_base) and model.startswith(_COMPAT_PREFIXES)


def is_openai_compatible(call: UpstreamCall) -> bool:
    """True when ``call`` can go to its ``api_base`` as-is."""
    return compatible_model(call.model, call.api_base)


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


class OpenAICompatChatModel:
    """Forwards calls to ``{api_base}/chat/completions`` over a shared httpx pool."""

    def __init__(
        self, *, max_connections: int = 512, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        limits = httpx.Limits(
            max_connections=max_connections, max_keepalive_connections=max_connections
        )
        self._client = httpx.AsyncClient(limits=limits, timeout=None, transport=transport)

    async def aclose(self) -> None:
        await self._client.aclose()

    @staticmethod
    def _request(call: UpstreamCall, *, stream: bool) -> tuple[str, dict[str, Any], dict[str, str]]:
        params = dict(call.params)
        extra = params.pop("extra_body", None) or {}
        body: dict[str, Any] = {
            "model": call.model.split("/", 1)[1],
            "messages": call.messages,
            **params,
            **extra,
            "stream": stream,
        }
        headers = {"authorization": f"Bearer {call.api_key}"} if call.api_key else {}
        url = f"{(call.api_base or '').rstrip('/')}/chat/completions"
        return url, body, headers

    def _error(self, call: UpstreamCall, exc: Exception | None = None,
               response: httpx.Response | None = None) -> UpstreamError:  # fmt: skip
        where = call.label or call.model
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
            return UpstreamTimeout(f"upstream {where} timed out after {call.timeout_s:.0f}s",
                                   upstream=where)  # fmt: skip
        kind = type(exc).__name__ if exc else "error"
        return UpstreamError(f"upstream {where} is unreachable ({kind}: {exc})", upstream=where)

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        attempt = 0
        while True:
            try:
                return await self._complete_once(call)
            except UpstreamError as exc:
                if attempt >= call.max_retries or not retryable(exc):
                    raise
            await asyncio.sleep(retry_delay_s(attempt))
            attempt += 1

    async def _complete_once(self, call: UpstreamCall) -> dict[str, Any]:
        url, body, headers = self._request(call, stream=False)
        try:
            response = await self._client.post(
                url, json=body, headers=headers, timeout=call.timeout_s
            )
        except httpx.HTTPError as exc:
            raise self._error(call, exc) from exc
        if response.status_code != 200:
            raise self._error(call, response=response)
        try:
            data: dict[str, Any] = response.json()
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise UpstreamError(
                f"upstream {call.label} sent invalid JSON", upstream=call.label
            ) from exc
        return data

    async def _open_stream(self, call: UpstreamCall) -> httpx.Response:
        """Send the request; the response once its status is 200 (retried before that)."""
        url, body, headers = self._request(call, stream=True)
        attempt = 0
        while True:
            request = self._client.build_request("POST", url, json=body, headers=headers,
                                                 timeout=call.timeout_s)  # fmt: skip
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
            if attempt >= call.max_retries or not retryable(error):
                raise error
            await asyncio.sleep(retry_delay_s(attempt))
            attempt += 1

    async def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
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
                    chunk = json.loads(payload)
                except json.JSONDecodeError as exc:
                    raise UpstreamError(f"upstream {call.label} sent a malformed stream chunk",
                                        upstream=call.label) from exc  # fmt: skip
                if isinstance(chunk, dict) and "error" in chunk:
                    raise UpstreamError(f"upstream {call.label} failed mid-stream: {chunk['error']}",
                                        upstream=call.label)  # fmt: skip
                yield chunk
            if not done:
                raise UpstreamError(f"upstream {call.label} ended the stream without [DONE] "
                                    "(truncated)", upstream=call.label)  # fmt: skip
        except httpx.HTTPError as exc:
            raise self._error(call, exc) from exc
        finally:
            # Closing the response drops the connection, which stops llama-server's generation.
            await response.aclose()


class DispatchingChatModel:
    """Sends OpenAI-compatible routes through the fast path, everything else through litellm."""

    def __init__(self, fast: OpenAICompatChatModel, general: ChatModel) -> None:
        self.fast = fast
        self.general = general

    def _pick(self, call: UpstreamCall) -> ChatModel:
        return self.fast if is_openai_compatible(call) else self.general

    async def complete(self, call: UpstreamCall) -> dict[str, Any]:
        return await self._pick(call).complete(call)

    def stream(self, call: UpstreamCall) -> AsyncIterator[dict[str, Any]]:
        return self._pick(call).stream(call)
