"""Backfill audits memories stored without an audit, with the shipped scripted auditor
(a fake: the behaviour under test is the backfill's bookkeeping, not judgement).

The store tests use the real mem0 store; the scripted chat model stands in for the
auditor model (what it judges is not the point: which store is read is)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dmt_proxy.audit.protocol import AuditorUnavailable
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.cli.proxy_cli import main
from dmt_proxy.memory.assembly import backfill_store
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.base import MemoryRecord, Scope
from dmt_proxy.memory.registry import BackendConfig, create_backend
from dmt_proxy.memory.write.backfill import backfill
from dmt_proxy.net import free_port
from dmt_proxy.policy import AuditPolicy, TagAction, parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.upstream.local_models import LOCAL_MODELS


def verdict(candidate: AuditCandidate) -> AuditVerdict:
    if "lazy" in candidate.text:
        return AuditVerdict.biased(
            "ses", score=0.8, target_group="low-income", tendency="against the poor"
        )
    return AuditVerdict.clean()


async def seed(backend: InMemoryBackend) -> None:
    for i, (user, text, status) in enumerate([
        ("u1", "Poor people are lazy. What is GDP?", AuditStatus.UNAUDITED),
        ("u1", "What is GDP?", AuditStatus.UNAUDITED),
        ("u1", "Already fine.", AuditStatus.CLEAN),
        ("u2", "The poor are lazy, right?", AuditStatus.FAILED),
    ]):  # fmt: skip
        scope = Scope(user=user)
        await backend.write(
            scope, MemoryRecord(id=f"m{i}", scope=scope, text=text, audit_status=status)
        )


async def test_backfill_tags_and_cleans_only_unaudited_and_failed() -> None:
    backend = InMemoryBackend()
    await seed(backend)
    auditor = ScriptedAuditor(verdict)
    report = await backfill(backend, auditor, AuditPolicy(), ["u1", "u2"])
    assert report.examined == 4 and report.audited == 3
    assert report.outcomes == {"tagged": 2, "clean": 1}
    assert len(auditor.calls) == 3
    statuses = {
        r.id: r.audit_status for u in ("u1", "u2") for r in await backend.list(Scope(user=u))
    }
    assert statuses == {"m0": AuditStatus.TAGGED, "m1": AuditStatus.CLEAN, "m2": AuditStatus.CLEAN,
                        "m3": AuditStatus.TAGGED}  # fmt: skip
    tagged = await backend.get(Scope(user="u1"), "m0")
    assert tagged is not None and tagged.tag is not None and tagged.tag.bias_type == "ses"


async def test_backfill_drop_policy_and_unavailable_auditor() -> None:
    backend = InMemoryBackend()
    await seed(backend)
    report = await backfill(
        backend, ScriptedAuditor(verdict), AuditPolicy(action=TagAction.DROP), ["u2"]
    )
    assert report.dropped == 1 and await backend.get(Scope(user="u2"), "m3") is None
    down = ScriptedAuditor([AuditorUnavailable("down", upstream="a", retryable=True)])
    report = await backfill(backend, down, AuditPolicy(), ["u1"])
    assert report.unavailable == 2 and report.audited == 0
    m0 = await backend.get(Scope(user="u1"), "m0")
    assert m0 is not None and m0.audit_status is AuditStatus.UNAUDITED


# The store the policy names is the store backfilled: the policy's backend options
# (here a non-default mem0 collection) select it, as they do for the proxy itself.
# The scripted auditor model answers a JSON verdict (it returns no log-probs), so the policy
# asks for JSON verdicts: one call per memory.
OTHER_STORE = {"version": 1, "memory": {"backend": "mem0", "options": {"collection": "other"}},
               "audit": {"verdict": "json"}}  # fmt: skip
BIASED_REPLY = json.dumps({
    "rationale": "Generalizes about the poor.", "bias_detected": True, "bias_type": "ses",
    "target_group": "low-income", "tendency": "against the poor", "score": 0.8,
})  # fmt: skip


async def seed_store(state_dir: Path, options: dict[str, str]) -> None:
    """One unaudited memory for u1, written straight into the store ``options`` pick."""
    backend = await create_backend("mem0", BackendConfig(state_dir=state_dir, options=options))
    scope = Scope(user="u1")
    record = MemoryRecord(id="m0", scope=scope, text="Poor people are lazy. What is GDP?",
                          audit_status=AuditStatus.UNAUDITED)  # fmt: skip
    await backend.write(scope, record)
    await backend.close()


async def test_backfill_store_reads_the_store_the_policy_options_select(state_dir: Path) -> None:
    await seed_store(state_dir, {"collection": "other"})
    chat = ScriptedChatModel([BIASED_REPLY])  # stands in for the auditor model
    report = await backfill_store(Settings.from_env({}, state_dir=state_dir),
                                  parse_policy(OTHER_STORE), ["u1"], chat=chat)  # fmt: skip
    assert report.examined == 1 and report.outcomes == {"tagged": 1}
    assert len(chat.calls) == 1 and chat.calls[0].endpoint.name == "local/qwen2.5-1.5b"
    backend = await create_backend(
        "mem0", BackendConfig(state_dir=state_dir, options={"collection": "other"})
    )
    stored = await backend.get(Scope(user="u1"), "m0")
    await backend.close()
    assert stored is not None and stored.audit_status is AuditStatus.TAGGED


def test_audit_backfill_command_opens_the_policys_store(
    state_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    """The command line path: no auditor model is running, so the record is left as it was,
    but it is found (examined), which it was not when the store was opened without options."""
    import asyncio

    asyncio.run(seed_store(state_dir, {"collection": "other"}))
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(json.dumps(OTHER_STORE), encoding="utf-8")
    port = free_port()  # a port nothing listens on: the auditor is unreachable
    base = port - list(LOCAL_MODELS).index("qwen2.5-1.5b")
    monkeypatch.setenv("DMT_MODELS_PORT_BASE", str(base))
    code = main(["--state-dir", str(state_dir), "audit-backfill", "--user", "u1",
                 "--policy", str(policy_file)])  # fmt: skip
    lines = capsys.readouterr().out.splitlines()
    report = json.loads("\n".join(lines[lines.index("{") :]))
    assert code == 1
    assert report["examined"] == 1 and report["unavailable"] == 1
