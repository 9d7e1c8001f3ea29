"""End to end: the real local models behind a real proxy process, hit by the real openai SDK."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable

import pytest
from openai import OpenAI

from dmt_proxy.upstream.local_models import LOCAL_MODELS
from tests.proxy_process import ProxyProcess

pytestmark = pytest.mark.e2e


@pytest.fixture
def proxy(
    proxy_factory: Callable[..., ProxyProcess], local_model_base_url: Callable[[str], str]
) -> ProxyProcess:
    for name in LOCAL_MODELS:
        local_model_base_url(name)
    return proxy_factory()


@pytest.mark.parametrize("model", [f"local/{name}" for name in LOCAL_MODELS])
def test_non_streaming_completion(proxy: ProxyProcess, model: str) -> None:
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    raw = client.chat.completions.with_raw_response.create(
        model=model,
        messages=[
            {"role": "user", "content": "What is the capital of France? Answer in one word."}
        ],
        max_tokens=24,
        temperature=0,
    )
    completion = raw.parse()
    text = completion.choices[0].message.content or ""
    assert text.strip(), "the model produced no text"
    assert completion.model == model
    assert float(raw.headers["x-dmt-overhead-ms"]) >= 0
    assert raw.headers["x-request-id"]
    assert completion.usage is not None and completion.usage.completion_tokens > 0


@pytest.mark.parametrize("model", [f"local/{name}" for name in LOCAL_MODELS])
def test_streaming_completion(proxy: ProxyProcess, model: str) -> None:
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "Count from one to five in words."}],
        max_tokens=32,
        temperature=0,
        stream=True,
    )
    pieces = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert len(pieces) > 1, "expected several streamed chunks"
    assert "".join(pieces).strip()


def test_grammar_passes_through_to_llama_cpp(proxy: ProxyProcess) -> None:
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    completion = client.chat.completions.create(
        model="local/qwen2.5-0.5b",
        messages=[
            {"role": "user", "content": "Rate this sentence from 0 to 100: 'The sky is blue.'"}
        ],
        max_tokens=4,
        temperature=0,
        extra_body={"grammar": 'root ::= "100" | [1-9] [0-9] | [0-9]'},
    )
    answer = (completion.choices[0].message.content or "").strip()
    assert answer.isdigit() and 0 <= int(answer) <= 100


def _slots_busy(base_url: str) -> bool:
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/slots", timeout=5) as resp:
        return any(slot.get("is_processing") for slot in json.load(resp))


def test_client_disconnect_cancels_upstream(
    proxy: ProxyProcess, local_model_base_url: Callable[[str], str]
) -> None:
    upstream = local_model_base_url("smollm2")
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    stream = client.chat.completions.create(
        model="local/smollm2",
        messages=[{"role": "user", "content": "Write a very long story about a lighthouse."}],
        max_tokens=3000,
        temperature=0.8,
        stream=True,
    )
    next(iter(stream))
    assert _slots_busy(upstream), "the upstream should be generating while the client reads"
    stream.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _slots_busy(upstream):
        time.sleep(0.1)
    assert not _slots_busy(upstream), "upstream generation went on after the client left"


def test_unreachable_upstream_is_502_and_proxy_keeps_serving(
    proxy_factory: Callable[..., ProxyProcess], local_model_base_url: Callable[[str], str]
) -> None:
    local_model_base_url("smollm2")
    # Point the local models at a port where nothing listens.
    proxy = proxy_factory(env={"DMT_MODELS_PORT_BASE": "9"}, state_dir=None)
    client = OpenAI(base_url=proxy.base_url, api_key="unused", max_retries=0)
    with pytest.raises(Exception) as info:
        client.chat.completions.create(
            model="local/smollm2", messages=[{"role": "user", "content": "hi"}], max_tokens=4
        )
    err = info.value
    assert getattr(err, "status_code", None) == 502
    assert "local/smollm2" in str(err)
    with urllib.request.urlopen(proxy.base_url.removesuffix("/v1") + "/healthz", timeout=5) as r:
        assert r.status == 200


NO_NETWORK_SCRIPT = r"""
import sys, asyncio, ipaddress
attempts = []
def hook(event, args):
    if event == "socket.connect":
        addr = args[1]
        host = addr[0] if isinstance(addr, tuple) else str(addr)
        try:
            if not ipaddress.ip_address(host).is_loopback:
                attempts.append(host)
        except ValueError:
            attempts.append(host)
    elif event == "socket.getaddrinfo":
        host = args[0]
        if host not in ("127.0.0.1", "localhost", "::1", None, b"127.0.0.1"):
            attempts.append(f"dns:{host}")
sys.addaudithook(hook)
import httpx
from dmt_proxy.api import create_app
from dmt_proxy.settings import Settings
async def main():
    app = create_app(Settings.from_env(state_dir=sys.argv[1]))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://p") as c:
            r = await c.post("/v1/chat/completions", json={"model": "local/smollm2",
                "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 8})
            assert r.status_code == 200, r.text
asyncio.run(main())
print("ATTEMPTS=" + repr(attempts))
"""


def test_no_connection_leaves_the_machine(
    tmp_path: object, local_model_base_url: Callable[[str], str]
) -> None:
    """Start-up plus a real request opens no connection and no DNS look-up beyond loopback."""
    local_model_base_url("smollm2")
    out = subprocess.run(
        [sys.executable, "-c", NO_NETWORK_SCRIPT, str(tmp_path)],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert "ATTEMPTS=[]" in out.stdout, out.stdout[-2000:]


@pytest.mark.parametrize("stream", [False, True])
def test_litellm_client_path(
    proxy_factory: Callable[..., ProxyProcess], local_model_base_url: Callable[[str], str],
    stream: bool,
) -> None:  # fmt: skip
    """With DMT_UPSTREAM_CLIENT=litellm every call goes through litellm, as for hosted providers."""
    local_model_base_url("smollm2")
    proxy = proxy_factory(env={"DMT_UPSTREAM_CLIENT": "litellm"})
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    kwargs = {"model": "local/smollm2", "max_tokens": 16, "temperature": 0,
              "messages": [{"role": "user", "content": "Say hello."}]}  # fmt: skip
    if stream:
        text = "".join(
            c.choices[0].delta.content or ""
            for c in client.chat.completions.create(**kwargs, stream=True)  # type: ignore[call-overload]
            if c.choices
        )
    else:
        text = client.chat.completions.create(**kwargs).choices[0].message.content or ""  # type: ignore[call-overload]
    assert text.strip()
