"""The shipped fakes in ``dmt_proxy.testing``: where they may be imported from, and their API.

Production code must not lean on the fakes (the layers point one way), the fakes
must be usable without pytest, and a test changes a fake's script through its
public ``script()``, never by writing its private attributes.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dmt_proxy.audit.registry import AuditorConfig, create_auditor
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import Scope, StoreClosed
from dmt_proxy.settings import Settings
from dmt_proxy.testing.app import app_client
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.base import ModelEndpoint, UpstreamCall
from tests.timing import budget

PACKAGE = Path(__file__).resolve().parents[2] / "dmt_proxy"
CALL = UpstreamCall(endpoint=ModelEndpoint(model="m"), messages=[{"role": "user", "content": "hi"}])


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_production_module_imports_the_fakes() -> None:
    """Only ``dmt_proxy/testing`` imports it; a selectable fake is named by module string."""
    offenders = [
        str(path.relative_to(package.parent))
        for package in (PACKAGE, PACKAGE.parent / "dmt_bench")  # the research harness too
        for path in package.rglob("*.py")
        if "testing" not in path.relative_to(package).parts
        and any(m.startswith(("dmt_proxy.testing", "dmt_bench.testing"))
                for m in imported_modules(path))
    ]  # fmt: skip
    assert offenders == []


def test_the_scripted_auditor_is_still_a_selectable_plugin() -> None:
    auditor = create_auditor("scripted", AuditorConfig())
    assert isinstance(auditor, ScriptedAuditor)


async def test_chat_script_replaces_the_replies_from_its_first_entry() -> None:
    chat = ScriptedChatModel(["a", "b"])
    assert [(await chat.complete(CALL)).text() for _ in range(3)] == ["a", "b", "b"]
    chat.script(["c", "d"])
    chat.calls.clear()  # clearing the record does not move the script
    assert [(await chat.complete(CALL)).text() for _ in range(3)] == ["c", "d", "d"]
    chat.script([RuntimeError("down")])
    with pytest.raises(RuntimeError, match="down"):
        await chat.complete(CALL)
    chat.script(lambda call: f"{len(call.wire_messages())} message")
    assert (await chat.complete(CALL)).text() == "1 message"
    with pytest.raises(ValueError, match="at least one reply"):
        chat.script([])
    assert len(chat.calls) == 5


async def test_auditor_script_replaces_the_verdicts() -> None:
    auditor = ScriptedAuditor([AuditVerdict.biased("age")])
    assert (await auditor.audit(AuditCandidate(text="x"))).bias_detected
    auditor.script([AuditVerdict.clean(), AuditVerdict.biased("race")])
    verdicts = [await auditor.audit(AuditCandidate(text=t)) for t in "abc"]
    assert [v.bias_type for v in verdicts] == [None, "race", "race"]
    auditor.script([])  # empty: clean
    assert not (await auditor.audit(AuditCandidate(text="d"))).bias_detected


async def test_app_client_starts_and_stops_the_app(state_dir: Path) -> None:
    settings = Settings.from_env({}, state_dir=state_dir, admin_key="k")
    backend = InMemoryBackend()
    policy = {"version": 1, "mode": "dmt", "memory": {"backend": "memory"}}
    async with app_client(settings, policy=policy, upstream=ScriptedChatModel(["hello"]),
                          memory_backend=backend, auditor=ScriptedAuditor()) as proxy:  # fmt: skip
        body = {
            "model": "local/smollm2",
            "user": "u",
            "messages": [{"role": "user", "content": "hi"}],
        }
        resp = await proxy.client.post("/v1/chat/completions", json=body)
        assert resp.json()["choices"][0]["message"]["content"] == "hello"
        # A hang guard: the first audit loads the first stage's embedding model (seconds
        # from a cold disk cache).
        assert await proxy.memory.drain(timeout_s=budget(60))
        assert len(await backend.list(Scope(user="u"))) == 1
    assert proxy.client.is_closed
    with pytest.raises(StoreClosed):  # the app's memory service closed it on shutdown
        await backend.list(Scope(user="u"))
