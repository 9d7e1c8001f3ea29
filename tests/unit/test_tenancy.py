"""Tenancy: API keys map to tenants; a tenant's users never see another tenant's memories.

In-process app with the shipped in-memory backend, scripted auditor and scripted
chat model (fakes: the property is about scoping in the proxy, not model output).
The scripted model records every upstream prompt, which is where a leak would show.
The cross-tenant property runs again on the ``postgres`` backend and outbox in
``tests/integration/test_tenancy_postgres.py``, where the scope filter is SQL.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dmt_proxy.api import create_app
from dmt_proxy.api.auth import Tenants, hash_key
from dmt_proxy.audit.schema import AuditVerdict
from dmt_proxy.errors import ConfigError
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryBackend
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.timing import budget

KEYS = {"acme": "key-acme-1", "globex": "key-globex-2", "initech": "key-initech-3"}


def write_tenants(path: Path) -> Path:
    lines = ["version: 1", "tenants:"]
    for name, key in KEYS.items():
        lines += [f"  - name: {name}", f"    key_sha256: {hash_key(key)}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def make_app(
    tmp: Path,
    backend: MemoryBackend | None = None,
    memory: dict[str, Any] | None = None,
    **settings_overrides: Any,
) -> tuple[object, ScriptedChatModel]:
    settings = Settings.from_env(
        {},
        state_dir=tmp / "state",
        tenants_file=write_tenants(tmp / "t.yaml"),
        **settings_overrides,
    )
    chat = ScriptedChatModel(["noted"])
    memory = memory or {"backend": "memory"}
    policy = parse_policy({"version": 1, "memory": {**memory, "top_k": 50}})
    app = create_app(settings, policy=policy, upstream=chat,
                     memory_backend=backend or InMemoryBackend(),
                     auditor=ScriptedAuditor([AuditVerdict.clean()]))  # fmt: skip
    return app, chat


def body(text: str, user: str) -> dict[str, object]:
    return {"model": "local/smollm2", "user": user, "messages": [{"role": "user", "content": text}]}


async def test_keys_are_required_and_checked(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(  # type: ignore[attr-defined]
            transport=httpx.ASGITransport(app=app),
            base_url="http://p",  # type: ignore[arg-type]
        ) as c,
    ):
        for headers in ({}, {"authorization": "Bearer nope"}, {"authorization": "key-acme-1"}):
            resp = await c.post("/v1/chat/completions", json=body("hi", "u"), headers=headers)
            assert (
                resp.status_code == 401 and resp.json()["error"]["type"] == "authentication_error"
            )
        assert (await c.get("/v1/models")).status_code == 401
        ok = await c.post("/v1/chat/completions", json=body("hi", "u"),
                          headers={"authorization": "Bearer key-acme-1"})  # fmt: skip
        assert ok.status_code == 200


def test_bad_tenants_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    for text in ("tenants: []", "version: 1\ntenants:\n  - name: a\n    key_sha256: abc\n",
                 "version: 1\ntenants:\n  - name: 'a b'\n    key_sha256: " + "0" * 64 + "\n", ": :"):  # fmt: skip
        bad.write_text(text)
        with pytest.raises(ConfigError):
            Tenants.load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        Tenants.load(tmp_path / "missing.yaml")


TENANT_WRITES = st.lists(
    st.tuples(st.sampled_from(sorted(KEYS)), st.sampled_from(["alice", "bob", "a/b", "Alice"])),
    min_size=1,
    max_size=12,
)


async def check_no_cross_tenant_reads(app: Any, chat: ScriptedChatModel,
                                      writes: list[tuple[str, str]]) -> None:  # fmt: skip
    """Interleaved writes by (tenant, user); each reads back its own token and nobody else's."""
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(  # type: ignore[attr-defined]
            transport=httpx.ASGITransport(app=app),
            base_url="http://p",  # type: ignore[arg-type]
        ) as c,
    ):
        # Interleaved writes, each carrying a token unique to its (tenant, user).
        for tenant, user in writes:
            token = f"tok_{tenant}_{user.replace('/', 'SL')}"
            resp = await c.post("/v1/chat/completions", json=body(f"secret memory word {token}", user),
                                headers={"authorization": f"Bearer {KEYS[tenant]}"})  # fmt: skip
            assert resp.status_code == 200
        # A hang guard: the first audit loads the first stage's embedding model (seconds
        # from a cold disk cache).
        assert await app.state.memory.drain(timeout_s=budget(60))
        for tenant, user in set(writes):
            chat.calls.clear()
            await c.post("/v1/chat/completions", json=body("secret memory word tok", user),
                         headers={"authorization": f"Bearer {KEYS[tenant]}"})  # fmt: skip
            prompt = json.dumps(chat.calls[-1].wire_messages())
            own = f"tok_{tenant}_{user.replace('/', 'SL')}"
            assert own in prompt
            others = {f"tok_{t}_{u.replace('/', 'SL')}" for t, u in writes} - {own}
            leaked = [tok for tok in others if tok in prompt]
            assert leaked == [], f"{tenant}/{user} saw {leaked}"


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(writes=TENANT_WRITES)
def test_no_cross_tenant_reads(tmp_path_factory: pytest.TempPathFactory,
                               writes: list[tuple[str, str]]) -> None:  # fmt: skip
    tmp = tmp_path_factory.mktemp("tenancy")
    app, chat = make_app(tmp)
    asyncio.run(check_no_cross_tenant_reads(app, chat, writes))
