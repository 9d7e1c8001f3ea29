"""``ProxyChatModel``: langmem/trustcall's LangChain calls through the local tool-call layer.

The upstream is ``ScriptedChatModel`` (shipped fake): it answers the JSON text a
constrained local model writes, and records the call the layer sent, so these
tests check both directions (what reaches llama-server, what langmem gets back).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

from dmt_proxy.embedder import LocalEmbedder
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.langchain_chat import ProxyChatModel, openai_tool_choice
from dmt_proxy.memory.backends.langmem_backend import MANAGER_MAX_TOKENS, LangMemBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from dmt_proxy.upstream.local_tools import LocalToolsChatModel

with warnings.catch_warnings():
    # trustcall (langmem's extractor) imports Send from its pre-1.0 place.
    warnings.simplefilter("ignore", DeprecationWarning)
    from langmem.knowledge.extraction import Memory
    from trustcall._base import PatchDoc

LOCAL = ModelEndpoint(
    name="local/qwen2.5-1.5b", model="openai/qwen2.5-1.5b", api_base="http://127.0.0.1:8092/v1",
    kind="local",
)  # fmt: skip
HOSTED = ModelEndpoint(model="openai/gpt-4o-mini")
ALICE = Scope(user="alice")


def call_json(name: str, **arguments: object) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def schema_of(call: UpstreamCall) -> dict[str, object]:
    schema: dict[str, object] = call.params["response_format"]["json_schema"]["schema"]
    return schema


async def test_bound_tools_come_back_as_tool_calls() -> None:
    upstream = ScriptedChatModel([call_json("Memory", content="The user has a beagle.")])
    model = ProxyChatModel(upstream, LOCAL).bind_tools([Memory], tool_choice="any")
    reply = await model.ainvoke([HumanMessage("My beagle is called Rex.")])
    assert isinstance(reply, AIMessage)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [
        ("Memory", {"content": "The user has a beagle."})
    ]
    sent = upstream.calls[0]
    assert "tools" not in sent.params and sent.params["temperature"] == 0.0
    assert "Memory" in sent.wire_messages()[0]["content"]  # the tools prompt
    # "any" means a call is required: the schema offers no text answer.
    assert schema_of(sent)["properties"]["name"] == {"const": "Memory"}  # type: ignore[index]


async def test_a_named_choice_offers_only_that_tool() -> None:
    upstream = ScriptedChatModel([call_json("Memory", content="x")])
    bound = ProxyChatModel(upstream, LOCAL).bind_tools([PatchDoc, Memory], tool_choice="Memory")
    await bound.ainvoke([HumanMessage("hi")])
    assert "anyOf" not in schema_of(upstream.calls[0])
    # trustcall rebinds through ``.bound`` (RunnableBinding's model) when it adds a tool.
    again = bound.bound.bind_tools([PatchDoc, Memory], tool_choice="any")  # type: ignore[attr-defined]
    await again.ainvoke([HumanMessage("hi")])
    options = schema_of(upstream.calls[1])["anyOf"]
    assert [o["properties"]["name"]["const"] for o in options] == ["PatchDoc", "Memory"]  # type: ignore[index]


async def test_auto_may_answer_in_text_unless_forced() -> None:
    upstream = ScriptedChatModel([json.dumps({"name": "none", "content": "Nothing to keep."})])
    reply = await ProxyChatModel(upstream, LOCAL).bind_tools([Memory]).ainvoke("hi")
    assert reply.tool_calls == [] and reply.content == "Nothing to keep."
    forced = ProxyChatModel(upstream, LOCAL, force_tool_call=True).bind_tools([Memory])
    upstream.script([call_json("Memory", content="x")])
    reply = await forced.ainvoke("hi")
    assert [c["name"] for c in reply.tool_calls] == ["Memory"]
    assert schema_of(upstream.calls[-1])["properties"]["name"] == {"const": "Memory"}  # type: ignore[index]


async def test_output_that_does_not_validate_is_never_a_tool_call() -> None:
    upstream = ScriptedChatModel([call_json("Memory", text="wrong field")])
    reply = (
        await ProxyChatModel(upstream, LOCAL).bind_tools([Memory], tool_choice="any").ainvoke("hi")
    )
    assert reply.tool_calls == [] and "wrong field" in str(reply.content)


async def test_tool_history_is_sent_as_plain_turns() -> None:
    upstream = ScriptedChatModel([call_json("Memory", content="y")])
    model = ProxyChatModel(upstream, LOCAL).bind_tools([Memory], tool_choice="any")
    history = [
        SystemMessage("You are a memory manager."),
        HumanMessage("My cat is Biscuit."),
        AIMessage("", tool_calls=[{"name": "Memory", "args": {"content": "cat"}, "id": "c1"}]),
        ToolMessage("Memory c1 inserted.", tool_call_id="c1"),
    ]
    await model.ainvoke(history)
    sent = upstream.calls[0].wire_messages()
    assert [m["role"] for m in sent] == ["system", "system", "user", "assistant", "user"]
    assert json.loads(sent[3]["content"]) == {"name": "Memory", "arguments": {"content": "cat"}}
    assert sent[4]["content"] == "Result of Memory: Memory c1 inserted."


async def test_plain_chat_and_unsupported_uses() -> None:
    upstream = ScriptedChatModel(["Hello."])
    model = ProxyChatModel(upstream, LOCAL)
    assert (await model.ainvoke("hi")).content == "Hello."
    assert "response_format" not in upstream.calls[0].params
    with pytest.raises(TypeError, match="logprobs"):
        await model.ainvoke("hi", logprobs=True)
    with pytest.raises(NotImplementedError, match="async only"):
        model.invoke("hi")
    # Not wrapped twice: the proxy's chat model already carries the local layer.
    wrapped = LocalToolsChatModel(upstream)
    assert ProxyChatModel(wrapped, LOCAL)._chat is wrapped


def test_tool_choice_spellings() -> None:
    tools = [{"type": "function", "function": {"name": "Memory"}}]
    assert openai_tool_choice("any", tools) == "required"
    assert openai_tool_choice(None, tools) is None
    assert openai_tool_choice("auto", tools) == "auto"
    assert openai_tool_choice("Memory", tools) == {"type": "function",
                                                  "function": {"name": "Memory"}}  # fmt: skip
    assert openai_tool_choice(True, tools) == {"type": "function", "function": {"name": "Memory"}}
    with pytest.raises(ValueError):
        openai_tool_choice(True, tools * 2)


@pytest.fixture(scope="module")
def embedder() -> LocalEmbedder:
    return LocalEmbedder()


def manager_reply(call: UpstreamCall) -> str:
    """What a local model writes for langmem's manager: insert first, then patch."""
    text = json.dumps(call.wire_messages())
    if "PatchDoc" in text and "Lisbon" in text:
        existing = text.split("<instance id=")[1].split(" ")[0]
        return call_json(
            "PatchDoc", json_doc_id=existing, planned_edits="city",
            patches=[{"op": "replace", "path": "/content", "value": "Maya lives in Lisbon."}],
        )  # fmt: skip
    return call_json("Memory", content="Maya lives in Porto.")


async def test_langmem_manager_on_a_local_endpoint(tmp_path: Path, embedder: LocalEmbedder) -> None:
    upstream = ScriptedChatModel(manager_reply)
    config = BackendConfig(
        state_dir=tmp_path, embedder=embedder, chat=upstream, llm=LOCAL,
        options={"consolidate": True, "manager": "langmem"},
    )  # fmt: skip
    backend = await create_backend("langmem", config)
    assert isinstance(backend, LangMemBackend) and backend.manager_path == "langmem"
    first = MemoryRecord.from_interaction(ALICE, "I live in Porto.", "Nice city.")
    await backend.write(ALICE, first)
    second = MemoryRecord.from_interaction(ALICE, "I just moved to Lisbon.", "Congrats!")
    await backend.write(ALICE, second)
    assert backend.stats.failures == 0 and backend.stats.langmem_runs == 2
    derived = [r for r in await backend.list(ALICE) if r.metadata.get("kind") == "consolidated"]
    assert [d.text for d in derived] == ["Maya lives in Lisbon."]
    assert derived[0].metadata["sources"] == sorted([first.id, second.id])
    assert backend.stats.created == 1 and backend.stats.updated == 1
    # Every manager call was constrained to tool calls (langmem's first call is "auto").
    for call in upstream.calls:
        assert call.params["max_tokens"] == MANAGER_MAX_TOKENS
        assert "anyOf" in schema_of(call) or "const" in json.dumps(schema_of(call))
        assert '"none"' not in json.dumps(schema_of(call))
    await backend.close()


async def test_auto_keeps_the_json_manager_for_local_models(tmp_path: Path) -> None:
    config = BackendConfig(
        state_dir=tmp_path, chat=ScriptedChatModel(), llm=LOCAL, options={"consolidate": True}
    )
    backend = await create_backend("langmem", config)
    assert isinstance(backend, LangMemBackend) and backend.manager_path == "json"
    await backend.close()
    hosted = BackendConfig(
        state_dir=tmp_path, chat=ScriptedChatModel(), llm=HOSTED,
        options={"consolidate": True, "manager": "langmem"},
    )  # fmt: skip
    with pytest.raises(ConfigError, match="tool calls"):
        await create_backend("langmem", hosted)
