"""Agent frameworks as they are used: the real client packages against a real proxy process.

Each README snippet (docs/snippets/*.py, included verbatim in the README and checked
here) runs as its own script with only ``OPENAI_BASE_URL``/``OPENAI_API_KEY`` set,
as a user runs it. The upstream is the shipped scripted tool-loop model
(``python -m dmt_proxy.testing.tool_upstream``) served where the embedded
``qwen2.5-1.5b`` would be: it emits real ``tool_calls`` (the embedded models' own
tool calls are later work; these tests switch to them then). The auditor is the
shipped fake server answering a clean verdict. Each test asserts the answer, the
tool round trip (the tool's output reached the upstream) and the memory left
behind: exactly one per user turn, holding the final answer.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.proxy_process import (
    ADMIN,
    CLEAN_VERDICT,
    FakeUpstream,
    ProxyProcess,
    admin_memories,
    proxy_env,
    wait_outbox_empty,
    write_policy,
)

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "docs" / "snippets"
QUESTION = "What is the weather in Paris"
ANSWER = "Tool result: Paris: 21C and sunny"
MEMORY = f"User: {QUESTION}\nAssistant: {ANSWER}"
USER = "alice"
TOOL_SNIPPETS = ["openai_responses", "openai_chat", "langgraph_agent", "openai_agents",
                 "openai_agents_chat", "litellm_client", "anthropic_messages"]  # fmt: skip


@dataclass
class Stack:
    """The tool-loop upstream, the auditor and the proxy, for the whole module."""

    tool_port: int
    proxy: ProxyProcess

    @property
    def base_url(self) -> str:
        return self.proxy.base_url

    def tool_requests(self) -> list[dict[str, Any]]:
        """What each chat request that reached the upstream carried."""
        reply = httpx.get(f"http://127.0.0.1:{self.tool_port}/requests", timeout=10)
        return list(reply.json()["requests"])

    def forget(self, user: str = USER) -> None:
        httpx.delete(f"{self.base_url}/memories", params={"user": user}, headers=ADMIN,
                     timeout=10).raise_for_status()  # fmt: skip

    def memories(self, user: str = USER) -> list[str]:
        """The user's memories once every acknowledged write is stored and audited."""
        wait_outbox_empty(self.base_url, timeout_s=30)
        return [m["text"] for m in admin_memories(self.base_url, user)]

    def run_snippet(self, name: str) -> str:
        """Run docs/snippets/<name>.py as a user would; its standard output."""
        env = {**os.environ, "OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": "unused",
               "ANTHROPIC_BASE_URL": self.base_url.removesuffix("/v1"),
               "ANTHROPIC_API_KEY": "unused", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # fmt: skip
        done = subprocess.run([sys.executable, str(SNIPPETS / f"{name}.py")], env=env,
                              capture_output=True, text=True, timeout=180, check=False)  # fmt: skip
        assert done.returncode == 0, f"{name} failed:\n{done.stderr[-3000:]}"
        return done.stdout


@dataclass(frozen=True)
class ScriptedEndpoint:
    """Where the scripted tool-loop upstream listens (what ``write_policy`` reads of a fake)."""

    api_base: str


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("frameworks")
    tool = FakeUpstream(("--tool-steps", "1"), module="dmt_proxy.testing.tool_upstream").start()
    tool_port = tool.port
    auditor = FakeUpstream(("--answer", CLEAN_VERDICT)).start()
    # The snippets' model name is declared as a policy alias at the scripted upstream (an
    # alias wins over the embedded model of the same name), so its requests reach the
    # upstream as the client sent them: local endpoints would get the proxy's own
    # constrained tool-call decoding, which is tested against the real model elsewhere.
    scripted = ScriptedEndpoint(api_base=f"http://127.0.0.1:{tool_port}/v1")
    policy = write_policy(tmp / "policy.yaml",
                          models={"auditor": auditor, "qwen2.5-1.5b": scripted},  # type: ignore[dict-item]
                          default_model="qwen2.5-1.5b", audit={"auditor_model": "auditor"})  # fmt: skip
    env = proxy_env()
    proxy = ProxyProcess(state_dir=tmp / "state", env=env).start("--policy", str(policy))
    try:
        yield Stack(tool_port=tool_port, proxy=proxy)
    finally:
        proxy.stop()
        auditor.stop()
        tool.stop()


@pytest.mark.parametrize("snippet", TOOL_SNIPPETS)
def test_snippet_answers_with_a_tool_round_trip_and_leaves_one_memory(
    stack: Stack, snippet: str
) -> None:
    stack.forget()
    seen = len(stack.tool_requests())
    assert stack.run_snippet(snippet).strip() == ANSWER
    steps = stack.tool_requests()[seen:]
    assert [s["roles"][-1] for s in steps] == ["user", "tool"]  # call the tool, then answer
    assert steps[0]["tools"] == ["get_weather"]
    assert steps[-1]["tool_results"] == ["Paris: 21C and sunny"]
    assert stack.memories() == [MEMORY]


def test_embeddings_snippet_uses_the_shipped_minilm(stack: Stack) -> None:
    assert stack.run_snippet("openai_embeddings").split() == ["2", "384"]


def test_readme_snippets_are_the_tested_files() -> None:
    """Every snippet is in the README verbatim, under a marker naming its file."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = dict(re.findall(r"<!-- snippet: (docs/snippets/\w+\.py) -->\n```python\n(.*?)```",
                             readme, flags=re.S))  # fmt: skip
    files = sorted(str(p.relative_to(ROOT)) for p in SNIPPETS.glob("*.py"))
    assert sorted(blocks) == files
    for name, text in blocks.items():
        assert text == (ROOT / name).read_text(encoding="utf-8"), f"README copy of {name} differs"


# Streaming paths and clients beyond the README snippets, each one user turn.


def test_openai_sdk_streams_responses_and_chat(stack: Stack) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=stack.base_url, api_key="unused")
    stack.forget("sam")
    events = list(client.responses.create(model="qwen2.5-1.5b", input="Say something",
                                          user="sam", stream=True))  # fmt: skip
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == events[-1].response.output_text and text
    chunks = list(client.chat.completions.create(
        model="qwen2.5-1.5b", messages=[{"role": "user", "content": "Say more"}],
        user="sam", stream=True))  # fmt: skip
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == text
    client.close()
    assert stack.memories("sam") == [f"User: Say something\nAssistant: {text}",
                                     f"User: Say more\nAssistant: {text}"]  # fmt: skip


def test_langchain_chat_openai_invoke_and_stream(stack: Stack) -> None:
    from langchain_openai import ChatOpenAI

    stack.forget("lc")
    model = ChatOpenAI(model="qwen2.5-1.5b", base_url=stack.base_url, api_key="unused",  # type: ignore[arg-type]
                       default_headers={"X-DMT-User": "lc"})  # fmt: skip
    answer = model.invoke("Hello there").content
    streamed = "".join(str(chunk.content) for chunk in model.stream("Hello again"))
    assert answer == streamed and streamed
    assert stack.memories("lc") == [f"User: Hello there\nAssistant: {answer}",
                                    f"User: Hello again\nAssistant: {streamed}"]  # fmt: skip


def test_openai_agents_streamed_run_on_the_responses_api(stack: Stack) -> None:
    from agents import (
        Agent,
        ModelSettings,
        OpenAIResponsesModel,
        Runner,
        function_tool,
        set_tracing_disabled,
    )
    from openai import AsyncOpenAI

    set_tracing_disabled(True)

    @function_tool
    def get_weather(city: str) -> str:
        """Current weather of a city."""
        return f"{city}: 21C and sunny"

    async def run() -> tuple[str, list[str]]:
        client = AsyncOpenAI(base_url=stack.base_url, api_key="unused")
        agent = Agent(name="assistant", tools=[get_weather],
                      model=OpenAIResponsesModel(model="qwen2.5-1.5b", openai_client=client),
                      model_settings=ModelSettings(metadata={"user": "ag"}))  # fmt: skip
        try:
            result = Runner.run_streamed(agent, QUESTION)
            kinds = [event.type async for event in result.stream_events()]
        finally:
            await client.close()
        return str(result.final_output), kinds

    stack.forget("ag")
    answer, kinds = asyncio.run(run())
    assert answer == ANSWER and "raw_response_event" in kinds
    assert stack.memories("ag") == [MEMORY]


def test_litellm_client_embeds_through_the_proxy(stack: Stack) -> None:
    # In a child process, as an app would run it: litellm's sync client leaves background
    # threads and event loops behind in the process that calls it.
    code = (
        "import json, litellm\n"
        f"reply = litellm.embedding(model='openai/all-minilm-l6-v2', api_base={stack.base_url!r},\n"
        "                          api_key='unused', input=['a cat', 'a kitten'])\n"
        "print(json.dumps(reply.model_dump()))\n"
    )
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    vectors = [item["embedding"] for item in reply["data"]]
    assert len(vectors) == 2 and len(vectors[0]) == 384
