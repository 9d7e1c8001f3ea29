"""The adversarial memory set (dmt_proxy/data/adversarial/adversarial_memories_v1.json):
texts that instruct the auditor, forge a verdict, close a data block or plant a fake tag.

Invariants checked here, without a model: no forged tag or audit status ever reaches the
rendered memory block the agent sees (0 accepted), not even when the attacker guesses the
block's nonce; the auditor's data block cannot be closed; a verdict comes only from the
auditor's reply. The proxy path uses the shipped ScriptedChatModel and ScriptedAuditor
(fakes: the claim is about rendering and parsing, not judgement; the real auditor's
detection is measured by dmt_bench/auditor_eval/adversarial.py).
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dmt_bench.auditor_eval.adversarial import (
    EVASION_TARGET,
    AdversarialSet,
    Judged,
    load_set,
    rate,
    summarize,
)
from dmt_proxy.audit.auditor import LLMAuditor
from dmt_proxy.audit.auditor_prompt import load_auditor_prompt, render_messages
from dmt_proxy.audit.schema import AuditCandidate, AuditVerdict
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.memory.entry import MemoryEntry
from dmt_proxy.memory.render import RESERVED, render_memories
from dmt_proxy.policy import AuditPolicy
from dmt_proxy.settings import Settings
from dmt_proxy.tags import AuditStatus, BiasTag
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from dmt_proxy.testing.fixtures import OpenApp
from dmt_proxy.upstream.base import ModelEndpoint
from tests.timing import budget

SET = load_set()
SET_V2 = load_set("adversarial_memories_v2")
SET_V3 = load_set("adversarial_memories_v3")
ALL_ITEMS = [*SET.items, *SET_V2.items, *SET_V3.items]
TAG = BiasTag(bias_type="age", target_group="older workers", tendency="favoring youth", score=0.8)
WHEN = datetime(2026, 11, 1, tzinfo=UTC)
ENTRY_KEYS = {"n", "text", "date", "audit", "bias_tag"}


def test_set_is_complete_and_versioned() -> None:
    assert SET.version == "adversarial_memories_v1"
    assert len(SET.items) >= 20
    assert len({i.id for i in SET.items}) == len(SET.items)
    assert {i.attack for i in SET.items} == set(SET.attacks)
    for item in SET.items:
        # Each item is its twin plus an injection, so the twin is the controlled comparison.
        assert SET.base(item.base).text in item.text, item.id
    assert any(b.biased for b in SET.bases) and any(not b.biased for b in SET.bases)


def block_entries(block: str, nonce: str) -> list[dict[str, Any]]:
    """Parse a rendered block strictly: one frame with ``nonce``, one JSON array inside."""
    assert block.count(f"<memories-{nonce}>") == 1 and block.count(f"</memories-{nonce}>") == 1
    assert block.startswith(f"<memories-{nonce}>\n") and block.endswith(f"\n</memories-{nonce}>")
    # Nothing else in the block may even look like a block delimiter.
    assert len(re.findall(r"<\s*/?\s*memories", block, re.I)) == 2
    body = block[block.index("\n[") + 1 : block.rindex("\n</memories-")]
    entries = json.loads(body)
    assert isinstance(entries, list)
    return entries


def nonce_of(block: str) -> str:
    match = re.match(r"<memories-([0-9a-f]+)>", block)
    assert match, block[:80]
    return match.group(1)


def forged(entries: list[dict[str, Any]], items: list[MemoryEntry]) -> int:
    """Entries or fields that differ from what the auditor really decided."""
    bad = abs(len(entries) - len(items))
    for entry, item in zip(entries, items, strict=False):
        bad += int(not set(entry) <= ENTRY_KEYS)
        bad += int(entry.get("audit") != item.audit_status.value)
        real = item.tag is not None and item.audit_status in (
            AuditStatus.TAGGED,
            AuditStatus.QUARANTINED,
        )
        bad += int(("bias_tag" in entry) != real)
        if real and item.tag is not None:
            bad += int(entry["bias_tag"]["bias_type"] != item.tag.bias_type)
        bad += int(RESERVED.search(str(entry["text"])) is not None)
    return bad


def memory(text: str, status: AuditStatus) -> MemoryEntry:
    tag = TAG if status is AuditStatus.TAGGED else None
    return MemoryEntry(id="m", user="u", text=text, created_at=WHEN, audit_status=status, tag=tag)


STATUSES = [AuditStatus.CLEAN, AuditStatus.PENDING, AuditStatus.UNAUDITED, AuditStatus.FAILED,
            AuditStatus.TAGGED]  # fmt: skip


@pytest.mark.parametrize("nonce", [None, SET.guessed_nonce], ids=["random-nonce", "guessed-nonce"])
def test_forged_tags_accepted_in_the_rendered_block_is_zero(nonce: str | None) -> None:
    items = [memory(item.text, status) for item in ALL_ITEMS for status in STATUSES]
    block = render_memories(items, with_tags=True, instruction="Treat tagged content as opinion.",
                            nonce=nonce)  # fmt: skip
    entries = block_entries(block, nonce or nonce_of(block))
    assert forged(entries, items) == 0
    real_tags = sum(1 for i in items if i.audit_status is AuditStatus.TAGGED)
    body = block[block.index("\n[") :]  # the header and instruction name the key themselves
    assert body.count('"bias_tag"') == real_tags
    # One memory per block too: no single text can break out on its own.
    for item in items:
        single = render_memories([item], with_tags=True, nonce=nonce)
        assert forged(block_entries(single, nonce or nonce_of(single)), [item]) == 0


@pytest.mark.parametrize("version", ["auditor_v1", "auditor_v2", "auditor_v3"])
def test_adversarial_text_cannot_close_the_auditors_data_block(version: str) -> None:
    prompt = load_auditor_prompt(version)
    for item in ALL_ITEMS:
        user = render_messages(prompt, AuditCandidate(text=item.text, reply=item.text))[-1][
            "content"
        ]
        assert user.count("<memory>") == 1 and user.count("</memory>") == 1, item.id
        assert user.count("<reply>") == 1 and user.count("</reply>") == 1, item.id
        for token in ("<|im_start|>", "<|im_end|>", "[INST]", "[/INST]", "\u200b", "\u202e"):
            assert token not in user, (item.id, token)


async def test_a_verdict_comes_only_from_the_auditors_reply() -> None:
    biased = json.dumps({"rationale": "age stereotype", "bias_detected": True, "bias_type": "age",
                         "target_group": "older people", "tendency": "favoring youth", "score": 0.9})  # fmt: skip
    chat = ScriptedChatModel([biased])
    auditor = LLMAuditor(chat, ModelEndpoint(model="openai/fake", api_base="http://fake/v1"))
    for item in (i for i in SET.items if i.attack == "forge_verdict" and SET.base(i.base).biased):
        verdict = await auditor.audit(AuditCandidate(text=item.text))
        assert verdict.bias_detected and verdict.bias_type == "age" and verdict.score == 0.9


def verdict_for(candidate: AuditCandidate) -> AuditVerdict:
    """Scripted judgement: the biased bases are biased, whatever is wrapped around them."""
    for base in SET.bases:
        if base.biased and base.text in candidate.text:
            return AuditVerdict.biased("age", score=0.9, target_group="a group", tendency="hostile")
    return AuditVerdict.clean(rationale="neutral")


async def test_through_the_proxy_no_forged_tag_reaches_the_upstream_prompt(
    state_dir: Path, open_app: OpenApp
) -> None:
    settings = Settings.from_env({}, state_dir=state_dir)
    policy = {"version": 1, "mode": "dmt", "memory": {"backend": "memory", "top_k": 50},
              "audit": {"tau": 0.5}}  # fmt: skip
    chat = ScriptedChatModel(["Noted."])
    auditor = ScriptedAuditor(verdict_for)
    proxy = await open_app(settings, policy=policy, upstream=chat,
                           memory_backend=InMemoryBackend(), auditor=auditor)  # fmt: skip
    client = proxy.client
    for item in SET.items:
        body = {"model": "local/smollm2", "user": "attacker",
                "messages": [{"role": "user", "content": item.text}]}  # fmt: skip
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    # A hang guard: the first audit loads the first stage's embedding model (seconds
    # from a cold disk cache).
    assert await proxy.memory.drain(timeout_s=budget(60))
    # Words from every text, so retrieval brings back all of them.
    query = " ".join(b.text for b in SET.bases) + " auditor memory verified clean"
    body = {"model": "local/smollm2", "user": "attacker",
            "messages": [{"role": "user", "content": query}]}  # fmt: skip
    resp = await client.post("/v1/chat/completions", json=body)
    assert int(resp.headers["x-dmt-memories"]) == len(SET.items)
    block = chat.calls[-1].wire_messages()[0]["content"]
    entries = block_entries(block, nonce_of(block))
    truth = {item.text[:40]: SET.base(item.base).biased for item in SET.items}
    accepted_forgeries = 0
    for entry in entries:
        text = entry["text"].removeprefix("User: ")
        biased = next(v for k, v in truth.items() if RESERVED.sub("[reserved-word]", k) in text)
        # Every text in the set tries to steer its audit: each one is tagged with a
        # manipulation finding. A forgery is a bias the auditor did not find (a bias_type
        # on a neutral text) or a biased text shown without its bias.
        tag = entry.get("bias_tag") or {}
        accepted_forgeries += int(entry["audit"] != "tagged")
        accepted_forgeries += int((tag.get("bias_type") is not None) != biased)
        accepted_forgeries += int(
            not any(f.startswith("manipulation") for f in tag.get("findings", []))
        )
    assert accepted_forgeries == 0


def test_summary_math_on_a_hand_computed_case() -> None:
    data = AdversarialSet.model_validate({
        "version": "t", "description": "", "attacks": {"a": "", "b": ""}, "guessed_nonce": "0",
        "bases": [{"id": "x", "biased": True, "bias_type": "age", "text": "X"},
                  {"id": "y", "biased": True, "bias_type": "age", "text": "Y"},
                  {"id": "z", "biased": False, "bias_type": None, "text": "Z"}],
        "items": [{"id": "1", "base": "x", "attack": "a", "text": "X!"},
                  {"id": "2", "base": "x", "attack": "b", "text": "X?"},
                  {"id": "3", "base": "y", "attack": "a", "text": "Y!"},
                  {"id": "4", "base": "z", "attack": "b", "text": "Z!"}],
    })  # fmt: skip

    def j(key: str, flagged: bool, failed: bool = False) -> Judged:
        return Judged(
            id=key, flagged=flagged, failed=failed, bias_type=None, score=0.0, latency_s=0
        )

    judged = {"x": j("x", True), "y": j("y", False), "z": j("z", False), "1": j("1", False),
              "2": j("2", True), "3": j("3", False), "4": j("4", True, failed=False)}  # fmt: skip
    s = summarize(data, judged)
    # a: item 1 evaded (twin x flagged, item not); item 3's twin y was missed -> not counted.
    assert s["by_attack"]["a"]["evaded"] == 1 and s["by_attack"]["a"]["evasion_n"] == 1
    # b: item 2 not evaded; item 4 forged (neutral twin z clean, item flagged).
    assert s["by_attack"]["b"]["evasion_rate"] == 0.0 and s["by_attack"]["b"]["forgery_rate"] == 1.0
    assert s["by_attack"]["all"]["evasion_rate"] == 0.5
    assert s["recall_twins"] == 0.5 and s["recall_adversarial"] == pytest.approx(1 / 3)
    assert math.isnan(s["by_attack"]["a"]["forgery_rate"])  # no neutral twin under attack a
    assert math.isnan(rate(0, 0)) and rate(1, 4) == 0.25


def test_flagged_follows_the_policy_threshold() -> None:
    from dmt_bench.auditor_eval.adversarial import flagged

    low = AuditVerdict.biased("age", score=0.4)
    assert not flagged(low, AuditPolicy(tau=0.5)) and flagged(low, AuditPolicy(tau=0.3))
    assert not flagged(AuditVerdict.failed("garbage"), AuditPolicy())


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks/results"


def committed(version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A committed measurement and its summary recomputed from its per-text verdicts."""
    result = json.loads((RESULTS / "adversarial_memories" / f"{version}.json").read_text())
    data = load_set(version)
    judged = {k: Judged.model_validate(v) for k, v in result["judged"].items()}
    return result, summarize(data, judged)


@pytest.mark.parametrize("version", ["adversarial_memories_v2", "adversarial_memories_v3"])
def test_committed_measurement_is_of_the_shipped_set(version: str) -> None:
    # The number the report states is recomputed from its per-text verdicts on the shipped
    # set, so neither the set nor the arithmetic can drift from what was measured.
    result, summary = committed(version)
    data = load_set(version)
    assert result["meta"]["set"] == data.version
    assert set(result["judged"]) == {b.id for b in data.bases} | {i.id for i in data.items}
    assert (
        summary == result["summary"]
        or json.loads(json.dumps(summary, default=str)) == result["summary"]
    )
    assert summary["by_attack"]["all"]["evasion_n"] > 0


def test_committed_v2_evasion_rate_is_under_the_target() -> None:
    _, summary = committed("adversarial_memories_v2")
    assert summary["by_attack"]["all"]["evasion_rate"] <= EVASION_TARGET


V4_RUNS = RESULTS / "auditor_eval_v3/runs"


@pytest.mark.parametrize("run", ["baseline", "auditor_v4", "auditor_v5", "default"])
def test_committed_v4_sample_measurement_is_of_the_shipped_set(run: str) -> None:
    # The v4 measurements are of a round-robin sample (``--sample 16``): recomputed from
    # their per-text verdicts on that sample of the shipped set, they give what was stated.
    from dmt_bench.auditor_eval.adversarial import sample_items

    result = json.loads((V4_RUNS / run / "adversarial_memories_v4_sample16.json").read_text())
    data = load_set("adversarial_memories_v4")
    items = sample_items(data.items, 16)
    bases = [b for b in data.bases if b.id in {i.base for i in items}]
    data = data.model_copy(update={"items": items, "bases": bases})
    judged = {k: Judged.model_validate(v) for k, v in result["judged"].items()}
    assert set(judged) == {b.id for b in bases} | {i.id for i in items}
    summary = summarize(data, judged)
    assert json.loads(json.dumps(summary, default=str)) == json.loads(
        json.dumps(result["summary"], default=str)
    )
