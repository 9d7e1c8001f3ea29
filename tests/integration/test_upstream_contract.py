"""The upstream client contract, run against every registered upstream client.

Parametrised over the registry (``known_clients()``: built-ins and entry-point
plug-ins), so a new client is checked the moment it is registered. Each one is
built by name, as ``DMT_UPSTREAM_CLIENT`` builds it, from the settings it declares
(``contract_config(state_dir)``; an installed client that declares none is skipped
with the reason, a built-in one fails), and pointed at the shipped fake upstream
server, run as its own process on a real port (the ``litellm`` client cannot take
an in-process transport). The fake is
not a model: it answers a canned text instantly, or the HTTP failure it is told
to, which is what this contract is about; real models are exercised in
``tests/e2e``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from dmt_proxy.errors import ConfigError, UpstreamError, UpstreamRejected
from dmt_proxy.net import free_port
from dmt_proxy.openai_types import ChatCompletion, ChatCompletionChunk
from dmt_proxy.settings import Settings
from dmt_proxy.testing import upstream_server as fake_server
from dmt_proxy.upstream.base import ModelEndpoint, OwnedChatModel, UpstreamCall
from dmt_proxy.upstream.clients import (
    ENTRY_POINT_GROUP,
    UPSTREAM_CLIENTS,
    client_class,
    create_client,
    known_clients,
)
from dmt_proxy.upstream.factory import build_chat_model
from tests.proxy_process import FakeUpstream

# litellm's stream handler builds a pydantic schema of its own ``ReadOnly`` TypedDicts on
# the first streamed chunk, and pydantic warns about the qualifier: third-party, harmless.
pytestmark = pytest.mark.filterwarnings(
    "ignore:Items? .* on TypedDict class .* using the `ReadOnly` qualifier:UserWarning"
)

NAMES = known_clients()
MESSAGES = [{"role": "user", "content": "Say something."}]


def _serve(*args: str) -> Iterator[str]:
    """A fake upstream process; yields its ``/v1`` base URL and stops it afterwards."""
    fake = FakeUpstream(args, module=fake_server.__name__).start()
    try:
        yield fake.api_base
    finally:
        fake.stop()


@pytest.fixture(scope="module")
def fake_base() -> Iterator[str]:
    yield from _serve()


@pytest.fixture(scope="module")
def rejecting_base() -> Iterator[str]:
    yield from _serve("--fail-status", "400")


@pytest.fixture(scope="module")
def failing_base() -> Iterator[str]:
    yield from _serve("--fail-status", "503")


def call_to(api_base: str) -> UpstreamCall:
    """A call to the OpenAI-compatible server at ``api_base``, with no retries."""
    endpoint = ModelEndpoint(name="fake", model="openai/fake", api_base=api_base,
                             api_key="unused", timeout_s=20, max_retries=0)  # fmt: skip
    return UpstreamCall(endpoint, messages=MESSAGES)


def contract_settings(name: str, state_dir: Path) -> Settings:
    """The settings client ``name`` declares for the contract."""
    try:
        settings: Settings = UPSTREAM_CLIENTS.contract_config(name, state_dir)
    except LookupError as exc:
        if UPSTREAM_CLIENTS.is_builtin(name):
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    return settings


@pytest.fixture(params=NAMES)
async def client(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[OwnedChatModel]:
    built = create_client(request.param, contract_settings(request.param, tmp_path))
    yield built
    await built.aclose()


def test_the_builtins_are_registered_under_their_group() -> None:
    assert {"auto", "litellm", "openai-compat"} <= set(NAMES)
    assert UPSTREAM_CLIENTS.group == ENTRY_POINT_GROUP == "dmt_proxy.upstream_clients"


def test_registered_classes_carry_their_name() -> None:
    for name in NAMES:
        cls = client_class(name)
        assert cls.name == name and isinstance(cls.provider_models, bool)


def test_every_builtin_client_declares_its_contract_config(tmp_path: Path) -> None:
    builtins = [name for name in NAMES if UPSTREAM_CLIENTS.is_builtin(name)]
    assert {"auto", "litellm", "openai-compat"} <= set(builtins)
    for name in builtins:
        assert isinstance(UPSTREAM_CLIENTS.contract_config(name, tmp_path), Settings)


async def test_complete_returns_a_typed_completion(client: OwnedChatModel, fake_base: str) -> None:
    reply = await client.complete(call_to(fake_base))
    assert isinstance(reply, ChatCompletion)
    assert reply.text() == fake_server.ANSWER


async def test_stream_yields_typed_chunks(client: OwnedChatModel, fake_base: str) -> None:
    chunks = [chunk async for chunk in client.stream(call_to(fake_base))]
    assert chunks and all(isinstance(chunk, ChatCompletionChunk) for chunk in chunks)
    assert "".join(chunk.text() for chunk in chunks) == fake_server.ANSWER


async def test_unreachable_upstream_is_an_upstream_error(client: OwnedChatModel) -> None:
    dead = call_to(f"http://127.0.0.1:{free_port()}/v1")  # nothing listens there
    with pytest.raises(UpstreamError):
        await client.complete(dead)
    with pytest.raises(UpstreamError):
        async for _ in client.stream(dead):
            pass


async def test_a_rejected_request_keeps_its_status(
    client: OwnedChatModel, rejecting_base: str
) -> None:
    with pytest.raises(UpstreamRejected) as info:
        await client.complete(call_to(rejecting_base))
    assert info.value.status_code == 400


async def test_a_failing_upstream_is_an_upstream_error(
    client: OwnedChatModel, failing_base: str
) -> None:
    with pytest.raises(UpstreamError) as info:
        await client.complete(call_to(failing_base))
    assert not isinstance(info.value, UpstreamRejected) and info.value.status_code == 502


def test_an_unknown_client_setting_names_the_known_ones(tmp_path: Path) -> None:
    settings = Settings.from_env({"DMT_UPSTREAM_CLIENT": "nope"}, state_dir=tmp_path)
    known = ", ".join(NAMES)
    with pytest.raises(ConfigError) as info:
        build_chat_model(settings)
    assert str(info.value) == (
        f"DMT_UPSTREAM_CLIENT: unknown upstream client 'nope'; known upstream clients: {known}"
    )
