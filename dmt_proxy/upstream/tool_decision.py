"""Tool or text: a local model's decision read from its log-probs before the reply.

Asked for a reply that is either a tool call or text, the small embedded models
answer some plain questions with a call ("What is the capital of France?" ->
``get_weather``): the first name token of the constrained reply is a poor place to
decide, because by then the model is already writing a JSON tool call. So before
the reply the proxy asks the model one short yes/no question about the same
conversation (does the reply need a tool call?) and reads the first token's
log-probs: ``P(tool) = P(yes) / (P(yes) + P(no))``, summed over the spellings of
"yes" and "no" among the top log-probs. The reply is then constrained to a call
(``P(tool) > 0.5``) or to text.

The threshold is fixed a priori at 0.5 (the more likely answer wins); nothing is
fitted on the tool-task sets. When the top log-probs hold neither answer (a
server that returns none), there is no decision and the reply may be either, as
before.

Cost: the question is appended after the conversation, so the tools prompt and
the history stay a shared prefix that llama-server's prompt cache reuses for the
reply; the decision adds the question's ~45 prompt tokens and one generated token
(about 1.3 s on two cores for the 1.5B model: ~36 prompt tok/s, ~9 generated tok/s).
Hosted models never get here: ``local_tools`` only rewrites calls to local endpoints.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dmt_proxy.openai_types import ChatCompletion, ChatMessage
from dmt_proxy.upstream.base import ChatModel, UpstreamCall


class DescribedTool(Protocol):
    """What the decision shows of a tool (``local_tools.ToolSpec`` is one)."""

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...


PROMPT_VERSION = "tool_decision_v1"
INSTRUCTION = (
    "You decide whether an assistant must call one of its tools before it replies to the "
    "conversation. A tool is needed for live or current information, for facts about the "
    "user or people they know that are not in the conversation, to store or look up "
    "something for the user, or to take an action. No tool is needed for general "
    "knowledge, arithmetic, translation, greetings, thanks and small talk, or when the "
    "tool results shown already answer the request. Answer yes or no."
)
# Few-shot examples with their own tools (none of them in the tool-task sets): a fixed
# prefix, so llama-server's prompt cache holds it after the first request.
EXAMPLE_TOOLS = (
    "- get_stock_price: Current price of a stock\n"
    "- book_table: Book a restaurant table\n"
    "- find_order: Status of an order by its number\n"
    "- save_note: Save a note for the user\n"
    "- search_notes: Search the user's saved notes"
)
_EXAMPLES = (
    ("User: Who discovered penicillin?", "no"),
    ("User: What's Tesla's share price right now?", "yes"),
    ("User: Hey, how's it going?", "no"),
    ("User: Please note that my gym closes at 9pm.", "yes"),
    ("User: What did I say my gym's closing time was?", "yes"),
    ("User: What is 9 squared?", "no"),
    ("User: Book a table for two at Luigi's at 8pm.", "yes"),
    (
        'User: Where is my order 1234?\nAssistant called find_order({"number": "1234"})\n'
        'Result: {"status": "shipped"}',
        "no",
    ),
    ("User: Awesome, thank you!", "no"),
    (
        "User: Check Tesla's share price, then save a note with it.\nAssistant called "
        'get_stock_price({"symbol": "TSLA"})\nResult: {"price": 251.3}',
        "yes",
    ),
)
THRESHOLD = 0.5
"""Fixed a priori: the tool reply is chosen when it is the more likely answer."""
TOP_LOGPROBS = 10
_MAX_TURNS = 6  # the last turns decide; older ones only cost prompt tokens
_MAX_CHARS = 400


@dataclass(frozen=True)
class Decision:
    """The model's ``P(tool)`` and what it decides (None: no log-probs, no decision)."""

    p_tool: float | None

    @property
    def use_tool(self) -> bool | None:
        """True: call a tool; False: answer in text; None: undecided."""
        return None if self.p_tool is None else self.p_tool > THRESHOLD


def _case(tools: str, conversation: str, instructions: str = "") -> str:
    told = f"The assistant's instructions: {instructions}\n" if instructions else ""
    return (f"Tools:\n{tools}\n{told}Conversation:\n{conversation}\n"
            "Does the assistant need a tool now?")  # fmt: skip


def content_text(content: object) -> str:
    """A message's text (text parts joined)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def _clip(text: str) -> str:
    return text if len(text) <= _MAX_CHARS else text[: _MAX_CHARS - 1] + "…"


def conversation_text(messages: Sequence[ChatMessage]) -> str:
    """The conversation's last turns as plain lines (system messages left out)."""
    lines: list[str] = []
    for m in messages:
        if m.role == "assistant" and m.tool_calls:
            for call in m.tool_calls:
                fn = call.get("function") or {}
                lines.append(
                    f"Assistant called {fn.get('name')}({_clip(str(fn.get('arguments')))})"
                )
        elif m.role in ("tool", "function"):
            lines.append(f"Result: {_clip(content_text(m.content))}")
        elif m.role in ("user", "assistant"):
            lines.append(f"{m.role.capitalize()}: {_clip(content_text(m.content))}")
    return "\n".join(lines[-_MAX_TURNS:])


def decision_call(call: UpstreamCall, tools: Sequence[DescribedTool]) -> UpstreamCall:
    """The yes/no question about ``call``'s conversation: one token, top log-probs, greedy."""
    messages = [ChatMessage(role="system", content=INSTRUCTION)]
    for case, answer in _EXAMPLES:
        messages.append(ChatMessage(role="user", content=_case(EXAMPLE_TOOLS, case)))
        messages.append(ChatMessage(role="assistant", content=answer))
    listed = "\n".join(f"- {t.name}: {t.description}".rstrip(": ") for t in tools)
    # The agent's own instructions often say when to use its tools.
    told = " ".join(
        content_text(m.content) for m in call.messages if m.role in ("system", "developer")
    )
    case = _case(listed, conversation_text(call.messages), _clip(told.strip()))
    messages.append(ChatMessage(role="user", content=case))
    params: dict[str, Any] = {"max_tokens": 1, "temperature": 0, "logprobs": True,
                              "top_logprobs": TOP_LOGPROBS}  # fmt: skip
    return UpstreamCall(call.endpoint, messages, params, call.label)


def _top_logprobs(completion: ChatCompletion) -> list[dict[str, Any]]:
    if not completion.choices:
        return []
    logprobs = getattr(completion.choices[0], "logprobs", None)
    if not isinstance(logprobs, dict):
        return []
    content = logprobs.get("content")
    if not isinstance(content, list) or not content or not isinstance(content[0], dict):
        return []
    top = content[0].get("top_logprobs")
    return [t for t in top if isinstance(t, dict)] if isinstance(top, list) else []


def p_tool(completion: ChatCompletion) -> float | None:
    """``P(yes) / (P(yes) + P(no))`` from the first token's top log-probs; None without both."""
    mass = {"yes": 0.0, "no": 0.0}
    for entry in _top_logprobs(completion):
        token, logprob = entry.get("token"), entry.get("logprob")
        if not isinstance(token, str) or not isinstance(logprob, (int, float)):
            continue
        word = token.strip().lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = mass["yes"] + mass["no"]
    return mass["yes"] / total if total > 0 else None


async def decide(model: ChatModel, call: UpstreamCall, tools: Sequence[DescribedTool]) -> Decision:
    """Ask ``model`` whether the reply to ``call`` (the client's messages) needs one of ``tools``."""
    return Decision(p_tool(await model.complete(decision_call(call, tools))))
