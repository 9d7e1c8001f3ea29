"""The real ``anthropic`` SDK against a real proxy process in front of the embedded qwen2.5-1.5b.

``POST /v1/messages`` as a user meets it: a message, a stream, a tool round trip
the model makes itself (its structured tool calls, ``upstream.local_tools``), and
the README's snippet run as a script. Each user turn leaves exactly one memory:
the tool-call step stores nothing, the final answer stores the exchange. Mode is
``off`` (no auditing), so the test waits for no auditor model; the memory store
is the in-process one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.proxy_process import ADMIN, ADMIN_KEY, ProxyProcess, admin_memories, wait_outbox_empty

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
GREEDY = {"temperature": 0}
"""Sent as an extra field: the anthropic SDK 2.x has no ``temperature`` argument."""

ROOT = Path(__file__).resolve().parents[2]
SNIPPET = ROOT / "docs" / "snippets" / "anthropic_messages.py"
MODEL = "qwen2.5-1.5b"
TOOL = {"name": "get_weather", "description": "Current weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                         "required": ["city"]}}  # fmt: skip


@pytest.fixture(scope="module")
def proxy(
    tmp_path_factory: pytest.TempPathFactory, local_model_base_url: Callable[[str], str]
) -> Iterator[ProxyProcess]:
    local_model_base_url(MODEL)
    tmp = tmp_path_factory.mktemp("anthropic")
    policy = tmp / "policy.yaml"
    policy.write_text(
        "version: 1\nmode: 'off'\ndefault_model: local/qwen2.5-1.5b\n"
        "memory:\n  backend: memory\n  top_k: 3\n"
        "audit:\n  auditor_model: local/qwen2.5-1.5b\n"
    )
    env = {"DMT_ADMIN_KEY": ADMIN_KEY, "DMT_UPSTREAM_TIMEOUT_S": "900", "DMT_LOG_LEVEL": "warning"}
    proc = ProxyProcess(state_dir=tmp / "state", env=env).start("--policy", str(policy))
    try:
        yield proc
    finally:
        proc.stop()


def root(proxy: ProxyProcess) -> str:
    return proxy.base_url.removesuffix("/v1")


def memories(proxy: ProxyProcess, user: str) -> list[str]:
    """The user's memories once every acknowledged write is stored."""
    wait_outbox_empty(proxy.base_url, timeout_s=60)
    return [m["text"] for m in admin_memories(proxy.base_url, user)]


def client(proxy: ProxyProcess) -> Any:
    from anthropic import Anthropic

    return Anthropic(base_url=root(proxy), api_key="unused", timeout=900, max_retries=0)


def test_a_message_and_a_stream_each_leave_one_memory(proxy: ProxyProcess) -> None:
    sdk = client(proxy)
    user = {"user_id": f"an-{uuid.uuid4().hex[:8]}"}
    message = sdk.messages.create(model=MODEL, max_tokens=40, metadata=user, extra_body=GREEDY,
                                  system="Answer in one short sentence.",
                                  messages=[{"role": "user", "content": "Name a primary color."}])  # fmt: skip
    text = "".join(b.text for b in message.content if b.type == "text")
    assert text.strip() and message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens > 0 and message.id.startswith("msg_")
    with sdk.messages.stream(model=MODEL, max_tokens=40, metadata=user, extra_body=GREEDY,
                             messages=[{"role": "user", "content": "Name a planet."}]) as stream:  # fmt: skip
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed.strip() and final.content[0].type == "text"
    assert final.content[0].text == streamed and final.stop_reason in ("end_turn", "max_tokens")
    assert sorted(memories(proxy, user["user_id"])) == [
        f"User: Name a planet.\nAssistant: {streamed}",
        f"User: Name a primary color.\nAssistant: {text}",
    ]
    sdk.close()


def test_the_model_makes_a_tool_round_trip_and_the_turn_leaves_one_memory(
    proxy: ProxyProcess,
) -> None:
    sdk = client(proxy)
    user = {"user_id": f"tool-{uuid.uuid4().hex[:8]}"}
    question = "What is the weather in Paris right now? Use the tool."
    messages: list[Any] = [{"role": "user", "content": question}]
    first = sdk.messages.create(model=MODEL, max_tokens=160, metadata=user, extra_body=GREEDY,
                                tools=[TOOL], messages=messages)  # fmt: skip
    assert first.stop_reason == "tool_use"
    use = next(b for b in first.content if b.type == "tool_use")
    assert use.name == "get_weather" and str(use.input["city"]).lower() == "paris"
    messages += [{"role": "assistant", "content": first.content},
                 {"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id,
                                               "content": "Paris: 18 C and sunny"}]}]  # fmt: skip
    with sdk.messages.stream(model=MODEL, max_tokens=160, metadata=user, extra_body=GREEDY,
                             tools=[TOOL], messages=messages) as stream:  # fmt: skip
        final = stream.get_final_message()
    answer = "".join(b.text for b in final.content if b.type == "text")
    assert final.stop_reason == "end_turn" and answer.strip()
    assert memories(proxy, user["user_id"]) == [f"User: {question}\nAssistant: {answer}"]
    sdk.close()


def test_errors_are_anthropic_shaped(proxy: ProxyProcess) -> None:
    import anthropic

    sdk = client(proxy)
    with pytest.raises(anthropic.NotFoundError) as missing:
        sdk.messages.create(model="no-such-model", max_tokens=5,
                            messages=[{"role": "user", "content": "x"}])  # fmt: skip
    assert missing.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.BadRequestError, match="image"):
        sdk.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": "iVBORw0KGgo="}}]}])  # fmt: skip
    with pytest.raises(anthropic.NotFoundError, match="count_tokens"):
        sdk.messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": "x"}])
    sdk.close()


def test_the_readme_snippet_runs_and_leaves_one_memory(proxy: ProxyProcess) -> None:
    httpx.delete(f"{proxy.base_url}/memories", params={"user": "alice"}, headers=ADMIN,
                 timeout=30).raise_for_status()  # fmt: skip
    env = {**os.environ, "ANTHROPIC_BASE_URL": root(proxy), "ANTHROPIC_API_KEY": "unused"}
    done = subprocess.run([sys.executable, str(SNIPPET)], env=env, capture_output=True,
                          text=True, timeout=1200, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    answer = done.stdout.strip()
    assert answer
    stored = memories(proxy, "alice")
    assert len(stored) == 1  # one user turn, whatever its tool steps
    assert stored[0].startswith("User: What is the weather in Paris\nAssistant: ")
    assert stored[0].removeprefix("User: What is the weather in Paris\nAssistant: ").strip() in (
        answer, answer.splitlines()[-1])  # fmt: skip
