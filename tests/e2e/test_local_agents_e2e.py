"""Local agents: LangGraph and the OpenAI Agents SDK make a tool round trip on the embedded model.

A real proxy process in front of ``local/qwen2.5-1.5b``; each agent has one function
tool, must call it (a structured ``tool_calls`` reply, ``upstream.local_tools``),
get its result back and answer. The turn leaves one memory: the tool-call reply
stores nothing, the final answer stores the exchange.
"""

from __future__ import annotations

import asyncio
import importlib.util
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tests.proxy_process import ProxyProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
MODEL = "local/qwen2.5-1.5b"
ADMIN_KEY = "e2e-admin-key"
QUESTION = "What is the weather in Paris right now? Use the tool."


def _needs(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@pytest.fixture
def proxy(
    proxy_factory: Callable[..., ProxyProcess], local_model_base_url: Callable[[str], str]
) -> ProxyProcess:
    local_model_base_url("qwen2.5-1.5b")
    return proxy_factory(env={"DMT_ADMIN_KEY": ADMIN_KEY, "DMT_UPSTREAM_TIMEOUT_S": "900"})


def _headers(user: str) -> dict[str, str]:
    # Mode off: no auditing, so the test waits for no auditor model.
    return {"X-DMT-User": user, "X-DMT-Mode": "off"}


def memories(proxy: ProxyProcess, user: str) -> list[dict[str, Any]]:
    """The user's memories, stored and still queued."""
    resp = httpx.get(proxy.base_url + "/memories", params={"user": user},
                     headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=60)  # fmt: skip
    resp.raise_for_status()
    return list(resp.json()["data"])


def test_langgraph_react_agent_calls_a_tool_through_the_proxy(proxy: ProxyProcess) -> None:
    _needs("langchain", "langchain_openai", "langgraph", "langchain_core")
    # langchain 1.x's create_agent is LangGraph's ReAct agent (langgraph.prebuilt's is deprecated).
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    calls: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"{city}: 18 C and sunny"

    user = f"lg-{uuid.uuid4().hex[:8]}"
    llm = ChatOpenAI(model=MODEL, base_url=proxy.base_url, api_key="unused", temperature=0,
                     max_tokens=160, timeout=900, default_headers=_headers(user))  # fmt: skip
    agent = create_agent(llm, [get_weather])
    result = agent.invoke({"messages": [("user", QUESTION)]}, {"recursion_limit": 6})
    assert [c.lower() for c in calls] == ["paris"]
    kinds = [type(m).__name__ for m in result["messages"]]
    assert kinds[:3] == ["HumanMessage", "AIMessage", "ToolMessage"]
    assert result["messages"][1].tool_calls[0]["name"] == "get_weather"
    final = result["messages"][-1]
    assert kinds[-1] == "AIMessage" and str(final.content).strip() and not final.tool_calls
    assert len(memories(proxy, user)) == 1  # one user turn, one memory


def test_agents_sdk_agent_calls_a_function_tool_through_the_proxy(proxy: ProxyProcess) -> None:
    _needs("agents", "openai")
    from agents import (
        Agent,
        ModelSettings,
        OpenAIChatCompletionsModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)  # nothing leaves the machine
    calls: list[str] = []

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        calls.append(city)
        return f"{city}: 18 C and sunny"

    user = f"sdk-{uuid.uuid4().hex[:8]}"

    async def run() -> str:
        client = AsyncOpenAI(base_url=proxy.base_url, api_key="unused", timeout=900,
                             default_headers=_headers(user))  # fmt: skip
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        agent = Agent(name="weather", instructions="Answer weather questions with the tool.",
                      tools=[get_weather], model=model,
                      model_settings=ModelSettings(temperature=0, max_tokens=160))  # fmt: skip
        result = await Runner.run(agent, QUESTION, max_turns=4)
        await client.close()
        return str(result.final_output)

    final = asyncio.run(run())
    assert [c.lower() for c in calls] == ["paris"]
    assert final.strip()
    assert len(memories(proxy, user)) == 1
