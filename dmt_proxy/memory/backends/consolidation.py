"""LLM steps shared by the LangMem- and Letta-style backends, with structured JSON output.

The local models do not make tool calls, so instead of langmem's tool-calling
extractor the consolidation step asks for a JSON plan constrained by a JSON
schema (llama-server ``response_format``), then parses and validates it before
anything is stored. Prompts carry a version in their name; changing one means a
new version.

User text reaches the model only inside a JSON document (``json.dumps`` escapes
quotes and newlines), so it cannot close a delimiter and pose as instructions.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dmt_proxy.errors import ReplyInvalid
from dmt_proxy.upstream.base import ChatModel, ModelEndpoint, UpstreamCall

CONSOLIDATE_PROMPT_VERSION = "consolidate_v1"
CONSOLIDATE_PROMPT_V1 = """\
You extract long-term memories about a user from one conversation turn, like LangMem's memory
manager. The input is JSON: "EXISTING" memories (numbered) and the "NEW" turn (what the user said
and what the assistant answered). Answer with JSON only:
{"memories": [{"content": "...", "replaces": null}]}
Rules:
- Each content is one short sentence about the USER that starts with "The user": a fact,
  preference, plan, request or opinion the user expressed. Keep the user's own terms: never
  endorse, soften or correct an opinion (another component audits them).
- If it updates or repeats an EXISTING memory, set "replaces" to that memory's number and write
  the full updated sentence; otherwise set "replaces" to null.
- Write 1 to 3 memories. Only what the user said counts, not the assistant's advice.
Example: the user says "I moved to Lyon for a nursing job." ->
{"memories": [{"content": "The user moved to Lyon for a nursing job.", "replaces": null}]}"""

SUMMARY_PROMPT_VERSION = "page_summary_v1"
SUMMARY_PROMPT_V1 = """\
You maintain the running summary of an assistant's conversation history with one user, like
MemGPT's recursive summary of messages evicted from its context window. You receive a JSON
document with the PREVIOUS summary and the EVICTED interactions. Write the new summary: it must
cover the previous summary and the evicted interactions, keep facts, requests, preferences and
opinions the user stated (in the user's terms, without endorsing or softening them), and stay
under {max_words} words. Answer with JSON only: {{"summary": "..."}}"""


class ConsolidationError(ReplyInvalid):
    """The model's reply was not a valid plan."""


class ExtractedMemory(BaseModel):
    """One memory the manager wants stored: new, or replacing EXISTING[replaces]."""

    model_config = ConfigDict(extra="ignore")
    content: str = Field(min_length=1, max_length=2000)
    replaces: str | None = None

    @property
    def target(self) -> int | None:
        """Index of the existing memory this one updates (None: a new memory)."""
        value = (self.replaces or "").strip()
        return int(value) if value.isdigit() else None


class ConsolidationPlan(BaseModel):
    """What the memory manager decided for one interaction."""

    model_config = ConfigDict(extra="ignore")
    memories: list[ExtractedMemory] = Field(default_factory=list, max_length=8)


class SummaryReply(BaseModel):
    model_config = ConfigDict(extra="ignore")
    summary: str = Field(min_length=1, max_length=20_000)


PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memories": {
            "type": "array",
            "minItems": 1,
            "maxItems": 3,
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1, "maxLength": 300},
                    "replaces": {"type": ["string", "null"]},
                },
                "required": ["content", "replaces"],
            },
        }
    },
    "required": ["memories"],
}

SUMMARY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"summary": {"type": "string", "minLength": 1}},
    "required": ["summary"],
}


def _response_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}


async def _ask_json(
    chat: ChatModel,
    llm: ModelEndpoint,
    system: str,
    document: dict[str, Any],
    *,
    name: str,
    schema: dict[str, Any],
    max_tokens: int,
) -> Any:
    call = UpstreamCall(
        llm,
        messages=[
            {"role": "system", "content": system},
            {"role": "user", "content": json.dumps(document, ensure_ascii=False)},
        ],
        params={
            "response_format": _response_format(name, schema),
            "temperature": 0,
            "max_tokens": max_tokens,
        },
        label=f"memory {name}",
    )
    text = (await chat.complete(call)).text().strip()
    if text.startswith("```"):  # some models fence JSON even when constrained
        text = text.strip("`").removeprefix("json").strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConsolidationError(f"{name}: reply is not JSON: {text[:200]!r}") from exc


async def plan_consolidation(
    chat: ChatModel, llm: ModelEndpoint, existing: list[str], query: str, answer: str
) -> ConsolidationPlan:
    """Ask the model how to fold interaction (query, answer) into ``existing`` memories."""
    document = {
        "EXISTING": [{"number": str(i), "memory": text} for i, text in enumerate(existing)],
        "NEW": {"user": query, "assistant": answer},
    }
    raw = await _ask_json(
        chat,
        llm,
        CONSOLIDATE_PROMPT_V1,
        document,
        name="memory_plan",
        schema=PLAN_SCHEMA,
        max_tokens=400,
    )
    try:
        return ConsolidationPlan.model_validate(raw)
    except ValidationError as exc:
        raise ConsolidationError(f"memory_plan: invalid plan: {exc.errors()[:2]}") from exc


async def summarize_with_model(
    chat: ChatModel, llm: ModelEndpoint, previous: str, evicted: list[str], *, max_words: int
) -> str:
    """New running summary from the previous one and the evicted interactions."""
    document = {"PREVIOUS": previous, "EVICTED": evicted}
    raw = await _ask_json(
        chat,
        llm,
        SUMMARY_PROMPT_V1.format(max_words=max_words),
        document,
        name="page_summary",
        schema=SUMMARY_SCHEMA,
        max_tokens=min(4 * max_words, 2048),
    )
    try:
        return SummaryReply.model_validate(raw).summary.strip()
    except ValidationError as exc:
        raise ConsolidationError(f"page_summary: invalid reply: {exc.errors()[:2]}") from exc


def summarize_deterministic(previous: str, evicted: list[str], *, max_chars: int) -> str:
    """Model-free recursive summary: previous summary plus one clipped line per interaction.

    The oldest text falls off the front once ``max_chars`` is reached, so the
    summary stays bounded like the model-written one. Used when no chat model is
    configured, or when the model's reply is unusable.
    """
    lines = [previous] if previous else []
    for text in evicted:
        line = " ".join(text.split())
        lines.append(line if len(line) <= 200 else line[:199] + "…")
    joined = "\n".join(lines)
    if len(joined) <= max_chars:
        return joined
    clipped = joined[-max_chars:]
    cut = clipped.find("\n")
    return clipped[cut + 1 :] if 0 <= cut < len(clipped) - 1 else clipped
