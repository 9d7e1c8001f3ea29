"""Bad input gets an OpenAI-shaped 4xx, never a 5xx or a stack trace.

These tests drive the real app in-process with the shipped scripted chat model
(a fake upstream: they are about the proxy's request handling, not the model).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dmt_proxy.errors import UpstreamError, UpstreamTimeout
from dmt_proxy.settings import Settings
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.fixtures import OpenApp

URL = "/v1/chat/completions"
GOOD = {"model": "local/smollm2", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
def fake() -> ScriptedChatModel:
    return ScriptedChatModel(["hello there"])


@pytest.fixture
async def client(state_dir: Path, fake: ScriptedChatModel, open_app: OpenApp) -> httpx.AsyncClient:
    settings = Settings.from_env({}, state_dir=state_dir, max_body_bytes=2048)
    policy = {"version": 1, "memory": {"backend": "none"}}
    return (await open_app(settings, upstream=fake, policy=policy)).client


def assert_openai_error(
    resp: httpx.Response, status: int, param: str | None = None
) -> dict[str, Any]:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    assert "Traceback" not in err["message"]
    if param is not None:
        assert err["param"] == param
    assert resp.headers.get("x-request-id")
    return err


async def test_good_request_passes(client: httpx.AsyncClient) -> None:
    resp = await client.post(URL, json=GOOD)
    assert resp.status_code == 200
    assert resp.json()["choices"][0]["message"]["content"] == "hello there"
    assert float(resp.headers["x-dmt-overhead-ms"]) >= 0
    assert resp.headers["x-request-id"].startswith("req_")


async def test_malformed_json(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        URL, content=b"{not json", headers={"content-type": "application/json"}
    )
    err = assert_openai_error(resp, 400)
    assert "JSON" in err["message"]


async def test_body_not_an_object(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.post(URL, json=[1, 2]), 400)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "local/smollm2"}, "messages"),
        ({"model": "local/smollm2", "messages": []}, "messages"),
        ({"model": "local/smollm2", "messages": "hi"}, "messages"),
        (
            {"model": "local/smollm2", "messages": [{"role": "wizard", "content": "x"}]},
            "messages.0.role",
        ),
        ({"model": "local/smollm2", "messages": [{"content": "x"}]}, "messages.0.role"),
        ({**GOOD, "temperature": "hot"}, "temperature"),
        ({**GOOD, "temperature": 7}, "temperature"),
        ({**GOOD, "max_tokens": 0}, "max_tokens"),
        ({**GOOD, "stream": "yes please"}, "stream"),
        ({**GOOD, "n": 2}, "n"),
        ({**GOOD, "model": 42}, "model"),
        ({**GOOD, "audio": {"voice": "alloy"}}, "audio"),
        ({**GOOD, "functions": [{"name": "f"}]}, "functions"),
    ],
)
async def test_invalid_fields(client: httpx.AsyncClient, body: dict[str, Any], param: str) -> None:
    assert_openai_error(await client.post(URL, json=body), 400, param)


async def test_unknown_model(client: httpx.AsyncClient) -> None:
    err = assert_openai_error(
        await client.post(URL, json={**GOOD, "model": "no-such-model"}), 404, "model"
    )
    assert err["code"] == "model_not_found"


async def test_body_over_limit(client: httpx.AsyncClient) -> None:
    big = {**GOOD, "messages": [{"role": "user", "content": "x" * 5000}]}
    assert_openai_error(await client.post(URL, json=big), 413)


async def test_chunked_body_over_limit(client: httpx.AsyncClient) -> None:
    async def gen() -> AsyncIterator[bytes]:
        yield b'{"model": "local/smollm2", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}]}'

    resp = await client.post(URL, content=gen(), headers={"content-type": "application/json"})
    assert_openai_error(resp, 413)


async def test_bad_mode_header(client: httpx.AsyncClient) -> None:
    resp = await client.post(URL, json=GOOD, headers={"x-dmt-mode": "maximum"})
    assert_openai_error(resp, 400, "x-dmt-mode")


async def test_bad_memory_header(client: httpx.AsyncClient) -> None:
    resp = await client.post(URL, json=GOOD, headers={"x-dmt-memory": "sometimes"})
    assert_openai_error(resp, 400, "x-dmt-memory")


async def test_unknown_route_is_openai_shaped(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.get("/v1/nothing"), 404)


async def test_wrong_method(client: httpx.AsyncClient) -> None:
    assert_openai_error(await client.get(URL), 405)


async def test_upstream_down_is_502_naming_upstream(
    client: httpx.AsyncClient, fake: ScriptedChatModel
) -> None:
    fake.script(
        [
            UpstreamError(
                "upstream local/smollm2 at http://x failed: refused", upstream="local/smollm2"
            )
        ]
    )
    err = assert_openai_error(await client.post(URL, json=GOOD), 502)
    assert "local/smollm2" in err["message"]
    # The proxy keeps serving.
    fake.script(["back"])
    assert (await client.post(URL, json=GOOD)).status_code == 200


async def test_upstream_timeout_is_504(client: httpx.AsyncClient, fake: ScriptedChatModel) -> None:
    fake.script([UpstreamTimeout("upstream local/smollm2 timed out", upstream="local/smollm2")])
    assert_openai_error(await client.post(URL, json=GOOD), 504)


async def test_stream_upstream_failure_before_first_chunk_is_502(
    client: httpx.AsyncClient, fake: ScriptedChatModel
) -> None:
    fake.script([UpstreamError("upstream local/smollm2 failed", upstream="local/smollm2")])
    resp = await client.post(URL, json={**GOOD, "stream": True})
    assert_openai_error(resp, 502)


async def test_stream_format(client: httpx.AsyncClient) -> None:
    resp = await client.post(URL, json={**GOOD, "stream": True})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = [line[6:] for line in resp.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    text = "".join(json.loads(e)["choices"][0]["delta"].get("content", "") for e in events[:-1])
    assert text == "hello there"


async def test_models_and_health(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    ids = {m["id"] for m in models["data"]}
    assert {"local/qwen2.5-0.5b", "local/qwen2.5-1.5b", "local/smollm2"} <= ids
    health = (await client.get("/healthz")).json()
    assert health["status"] == "ok"


async def test_metrics_count_requests(client: httpx.AsyncClient) -> None:
    await client.post(URL, json=GOOD)
    await client.post(URL, json={**GOOD, "n": 3})
    text = (await client.get("/metrics")).text
    assert 'dmt_requests_total{mode="dmt",route="/v1/chat/completions",status="200"} 1.0' in text
    assert 'route="/v1/chat/completions",status="400"' in text
    assert "dmt_proxy_overhead_seconds_bucket" in text


async def test_ssp_mode_adds_static_prompt(
    client: httpx.AsyncClient, fake: ScriptedChatModel
) -> None:
    resp = await client.post(URL, json=GOOD, headers={"x-dmt-mode": "ssp"})
    assert resp.status_code == 200
    sent = fake.calls[-1].wire_messages()
    assert sent[0]["role"] == "system" and "neutral" in sent[0]["content"]
    assert sent[-1] == {"role": "user", "content": "hi"}
    await client.post(URL, json=GOOD, headers={"x-dmt-mode": "off"})
    assert fake.calls[-1].wire_messages() == [{"role": "user", "content": "hi"}]


async def test_no_user_says_so(client: httpx.AsyncClient) -> None:
    resp = await client.post(URL, json=GOOD)
    assert "no user" in resp.headers["x-dmt-memory"]
    resp = await client.post(URL, json={**GOOD, "user": "alice"})
    assert resp.headers["x-dmt-memory"] == "disabled"


async def test_extra_params_pass_through(
    client: httpx.AsyncClient, fake: ScriptedChatModel
) -> None:
    await client.post(URL, json={**GOOD, "temperature": 0, "grammar": "root ::= [0-9]"})
    params = fake.calls[-1].params
    assert params["temperature"] == 0 and params["grammar"] == "root ::= [0-9]"
