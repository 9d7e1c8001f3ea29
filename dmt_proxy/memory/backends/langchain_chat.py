"""Our chat model seam as a LangChain chat model, for langmem's own memory manager.

langmem (through trustcall) drives a LangChain ``BaseChatModel``: it calls
``bind_tools(tools, tool_choice=...)`` with pydantic classes or OpenAI tool dicts
and ``"any"``, a tool name or ``None`` as the choice, reads ``AIMessage.tool_calls``,
and reaches the bound model again through ``RunnableBinding.bound``. ``ChatOpenAI``
pointed at llama-server gets no ``tool_calls`` from the embedded models (they write
the call as JSON text), so for local endpoints the manager runs on this adapter
instead: each call goes through ``upstream.local_tools.LocalToolsChatModel``, which
constrains the output to one valid call (or a text answer) and returns it as a
real ``tool_calls`` message. One call per model turn: the local layer makes no
parallel calls, so langmem writes at most one new memory per step.

``force_tool_call`` turns ``tool_choice`` ``auto`` into ``required``: trustcall
binds langmem's first extraction with no choice, and qwen2.5-1.5b, allowed to
answer in text, answered ``{"name": "none", "content": "I learned that Rex is a
three-year-old beagle."}`` and so stored nothing (the JSON manager's schema asks
for at least one memory, so this puts both managers on the same footing).

Only the async path exists (the backend calls ``ainvoke``); ``invoke`` raises.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.messages.tool import ToolCall as LCToolCall
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import PrivateAttr

from dmt_proxy.openai_types import ChatCompletion
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.local_tools import LocalToolsChatModel

# OpenAI request parameters a bound model may carry; LangChain's own tracing hints
# (``ls_*``) are dropped, anything else is a caller error rather than silently lost.
_PASSED = frozenset({
    "tools", "tool_choice", "parallel_tool_calls", "max_tokens", "temperature", "top_p", "seed",
})  # fmt: skip


def openai_tool_choice(choice: object, tools: list[dict[str, Any]]) -> object:
    """LangChain's ``tool_choice`` spellings in OpenAI's form (as ``ChatOpenAI`` maps them)."""
    if choice is None or choice in ("auto", "none", "required"):
        return choice
    if choice == "any":
        return "required"
    if choice is True:
        if len(tools) != 1:
            raise ValueError("tool_choice=True needs exactly one tool")
        return {"type": "function", "function": {"name": tools[0]["function"]["name"]}}
    if isinstance(choice, str):
        return {"type": "function", "function": {"name": choice}}
    if isinstance(choice, dict):
        return choice
    raise ValueError(f"tool_choice {choice!r} is not supported")


def to_ai_message(completion: ChatCompletion) -> AIMessage:
    """The first choice of ``completion`` as an ``AIMessage`` with parsed ``tool_calls``."""
    if not completion.choices:
        return AIMessage(content="")
    message = completion.choices[0].message
    content = message.content if isinstance(message.content, str) else ""
    calls: list[LCToolCall] = []
    invalid = []
    for call in message.tool_calls or []:
        fn = call.function
        name = fn.name if fn is not None else None
        raw = fn.arguments if fn is not None else None
        try:
            args = json.loads(raw or "{}")
        except json.JSONDecodeError as exc:
            invalid.append(invalid_tool_call(name=name, args=raw, id=call.id, error=str(exc)))
            continue
        if not isinstance(args, dict) or not name:
            invalid.append(invalid_tool_call(name=name, args=raw, id=call.id,
                                             error="arguments are not an object"))  # fmt: skip
            continue
        calls.append(LCToolCall(name=name, args=args, id=call.id, type="tool_call"))
    usage = completion.usage
    metadata: dict[str, Any] = {"model_name": completion.model or ""}
    if completion.choices[0].finish_reason:
        metadata["finish_reason"] = completion.choices[0].finish_reason
    msg = AIMessage(
        content=content, tool_calls=calls, invalid_tool_calls=invalid, response_metadata=metadata
    )
    if usage is not None and usage.prompt_tokens is not None:
        msg.usage_metadata = {
            "input_tokens": usage.prompt_tokens or 0,
            "output_tokens": usage.completion_tokens or 0,
            "total_tokens": usage.total_tokens or 0,
        }
    return msg


class ProxyChatModel(BaseChatModel):
    """A LangChain chat model that calls ``endpoint`` through one of our ``ChatModel``s.

    ``chat`` is wrapped in ``LocalToolsChatModel`` (unless it already is one), so a
    local endpoint asked for tools answers with structured tool calls.
    """

    endpoint: ModelEndpoint
    temperature: float = 0.0
    max_tokens: int | None = None
    """Sent with every call unless the bound call names its own."""
    force_tool_call: bool = False
    """Send ``tool_choice`` ``auto`` (or none given) as ``required`` when tools are bound."""
    _chat: LocalToolsChatModel = PrivateAttr()

    def __init__(self, chat: ChatModel, endpoint: ModelEndpoint, **kwargs: Any) -> None:
        super().__init__(**{**kwargs, "endpoint": endpoint})
        self._chat = chat if isinstance(chat, LocalToolsChatModel) else LocalToolsChatModel(chat)

    @property
    def _llm_type(self) -> str:
        return "dmt-proxy"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model": self.endpoint.name, "temperature": self.temperature}

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Callable[..., Any] | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """This model with ``tools`` (in OpenAI's form) and ``tool_choice`` on every call."""
        formatted = [convert_to_openai_tool(tool) for tool in tools]
        choice = openai_tool_choice(tool_choice, formatted)
        if choice is not None:
            kwargs["tool_choice"] = choice
        return self.bind(tools=formatted, **kwargs)

    def _params(self, stop: list[str] | None, kwargs: dict[str, Any]) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": self.temperature}
        if self.max_tokens is not None:
            params["max_tokens"] = self.max_tokens
        for key, value in kwargs.items():
            if key.startswith("ls_"):
                continue
            if key not in _PASSED:
                raise TypeError(f"ProxyChatModel does not accept the parameter '{key}'")
            params[key] = value
        free_choice = params.get("tool_choice") in (None, "auto")
        if self.force_tool_call and params.get("tools") and free_choice:
            params["tool_choice"] = "required"
        if stop:
            params["stop"] = stop
        return params

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = UpstreamCall(
            self.endpoint,
            list(convert_to_openai_messages(messages)),
            self._params(stop, kwargs),
            label=f"langmem manager {self.endpoint.name}",
        )
        completion = await self._chat.complete(call)
        return ChatResult(generations=[ChatGeneration(message=to_ai_message(completion))])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        raise NotImplementedError("ProxyChatModel is async only: use ainvoke")
