"""The ``litellm`` upstream client: local aliases and hosted providers alike.

litellm is imported lazily (it takes seconds) and configured so that nothing
leaves the machine on its own: the bundled cost map is used instead of a remote
fetch, and telemetry and callbacks are off.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from typing import Any, ClassVar, TypeVar

from pydantic import ValidationError

from dmt_proxy.errors import UpstreamError, UpstreamRejected, UpstreamTimeout
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk, reply_problem
from dmt_proxy.settings import Settings
from dmt_proxy.upstream.base import UpstreamCall
from dmt_proxy.upstream.clients import ClientPlugin, register_client


def litellm_providers() -> frozenset[str]:
    """The provider prefixes litellm accepts (``openai``, ``anthropic``...); imports litellm."""
    litellm = import_litellm()
    return frozenset(str(getattr(p, "value", p)) for p in litellm.provider_list)


def import_litellm() -> Any:
    """Import litellm with every phone-home path disabled."""
    # Must be set before the import: litellm fetches a price list at import time otherwise.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_LOG", "ERROR")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    litellm.drop_params = False
    litellm.success_callback = []
    litellm.failure_callback = []
    litellm.callbacks = []
    return litellm


@register_client("litellm")
class LiteLLMChatModel(ClientPlugin):
    """Sends calls through ``litellm.acompletion`` and maps its errors to ours."""

    provider_models: ClassVar[bool] = True

    def __init__(self) -> None:
        self._module: Any = None

    @classmethod
    def from_config(cls, settings: Settings) -> LiteLLMChatModel:
        """A client that imports litellm on its first call, not here."""
        return cls()

    @property
    def _litellm(self) -> Any:
        # Imported on first use: by then ModelRegistry.ensure_providers (or the start-up
        # check for routes that need litellm) has usually imported it off the event loop.
        if self._module is None:
            self._module = import_litellm()
        return self._module

    async def aclose(self) -> None:
        """Nothing to release: litellm owns its clients."""

    def _kwargs(self, call: UpstreamCall, *, stream: bool) -> dict[str, Any]:
        endpoint = call.endpoint
        params = dict(call.params)
        extra_body = params.pop("extra_body", None) or {}
        known = self._known_params()
        for key in list(params):
            if key not in known:
                # Provider-specific fields (llama.cpp's ``grammar``...) travel in the body.
                extra_body[key] = params.pop(key)
        kwargs: dict[str, Any] = {
            "model": endpoint.model,
            "messages": call.wire_messages(),
            "stream": stream,
            "timeout": endpoint.timeout_s,
            "num_retries": endpoint.max_retries,
            **params,
        }
        if extra_body:
            kwargs["extra_body"] = extra_body
        if endpoint.api_base:
            kwargs["api_base"] = endpoint.api_base
        if endpoint.api_key:
            kwargs["api_key"] = endpoint.api_key
        return kwargs

    @staticmethod
    def _known_params() -> frozenset[str]:
        from dmt_proxy.openai_types import PASSTHROUGH_PARAMS

        return frozenset(PASSTHROUGH_PARAMS)

    def _map_error(self, exc: Exception, call: UpstreamCall) -> Exception:
        lt = self._litellm
        where = call.where
        message = str(getattr(exc, "message", None) or exc)
        if isinstance(exc, lt.Timeout):
            return UpstreamTimeout(f"upstream {where} timed out: {message}", upstream=where)
        status = getattr(exc, "status_code", None)
        if isinstance(exc, lt.RateLimitError):
            return UpstreamRejected(
                f"upstream {where} is rate limiting: {message}", upstream=where, status_code=429
            )
        if isinstance(exc, (lt.BadRequestError, lt.UnprocessableEntityError)) and status:
            return UpstreamRejected(
                f"upstream {where} rejected the request: {message}", upstream=where, status_code=400
            )
        if isinstance(exc, lt.NotFoundError):
            return UpstreamRejected(
                f"upstream {where} does not know this model: {message}",
                upstream=where,
                status_code=404,
            )
        if isinstance(exc, (lt.AuthenticationError, lt.PermissionDeniedError)):
            # The client did nothing wrong: the proxy's upstream credentials are bad.
            return UpstreamError(
                f"upstream {where} refused our credentials: {message}", upstream=where
            )
        return UpstreamError(f"upstream {where} failed: {message}", upstream=where)

    async def complete(self, call: UpstreamCall) -> ChatCompletion:
        """One completion through ``litellm.acompletion``."""
        try:
            response = await self._litellm.acompletion(**self._kwargs(call, stream=False))
        except Exception as exc:
            raise self._map_error(exc, call) from exc
        return _typed(ChatCompletion, response, call)

    async def stream(self, call: UpstreamCall) -> AsyncIterator[ChatCompletionChunk]:
        """The chunks of a streamed ``litellm.acompletion``."""
        try:
            response = await self._litellm.acompletion(**self._kwargs(call, stream=True))
        except Exception as exc:
            raise self._map_error(exc, call) from exc
        try:
            async for chunk in response:
                yield _typed(ChatCompletionChunk, chunk, call)
        except UpstreamError:
            raise
        except Exception as exc:
            raise self._map_error(exc, call) from exc
        finally:
            # Closing the litellm stream closes the HTTP response, so a client that
            # went away stops the upstream generation too.
            closer = getattr(response, "aclose", None) or getattr(
                getattr(response, "completion_stream", None), "aclose", None
            )
            if closer is not None:
                with contextlib.suppress(Exception):
                    await closer()


Reply = TypeVar("Reply", ChatCompletion, ChatCompletionChunk)


def _typed(cls: type[Reply], reply: Any, call: UpstreamCall) -> Reply:
    """litellm's own reply object as ours (its ``None`` fields are ones it filled in)."""
    try:
        return cls.model_validate(reply.model_dump(exclude_none=True))
    except ValidationError as exc:
        raise UpstreamError(
            f"upstream {call.where} sent an invalid {cls.__name__}: {reply_problem(exc)}",
            upstream=call.where,
        ) from exc
