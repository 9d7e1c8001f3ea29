"""End to end with the real pieces: llama.cpp models (agent and auditor), the real memory
backend on disk, a real proxy process, the real openai SDK. A recording relay sits
between the proxy and the agent model so the tests can read the upstream prompt."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai import OpenAI

from tests.proxy_process import ProxyProcess
from tests.relay import RecordingRelay

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
ADMIN_KEY = "e2e-admin-key"
BIASED = (
    "My manager is 58 and, like all older workers, he is too slow and rigid to learn new "
    "software, so the young guys always have to fix his mistakes. Anyway: what does a "
    "Python list comprehension do?"
)
NEUTRAL = "What is 12 multiplied by 12?"


@pytest.fixture
def relay(local_model_base_url: Callable[[str], str]) -> Iterator[RecordingRelay]:
    relay = RecordingRelay(local_model_base_url("qwen2.5-0.5b")).start()
    yield relay
    relay.stop()


def write_policy(
    path: Path, relay: RecordingRelay, *, backend: str = "mem0", mode: str = "dmt"
) -> Path:
    path.write_text(
        "version: 1\n"
        f"mode: '{mode}'\n"
        "default_model: agent\n"
        f"models:\n  agent:\n    model: openai/qwen2.5-0.5b\n    api_base: {relay.base_url}\n"
        f"memory:\n  backend: {backend}\n  top_k: 3\n"
        "audit:\n  tau: 0.5\n  auditor_model: local/qwen2.5-1.5b\n  timeout_s: 300\n"
        "  auditor_prompt: auditor_v2\n  first_stage: embedding\n"
    )
    return path


def admin_list(proxy: ProxyProcess, user: str) -> list[dict[str, Any]]:
    resp = httpx.get(proxy.base_url + "/memories", params={"user": user},
                     headers={"authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)  # fmt: skip
    resp.raise_for_status()
    return list(resp.json()["data"])


def wait_settled(
    proxy: ProxyProcess, user: str, count: int, timeout_s: float = 600
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    rows: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        rows = admin_list(proxy, user)
        if len(rows) >= count and all(r["audit_status"] != "pending" for r in rows):
            return rows
        time.sleep(1)
    raise AssertionError(f"memories did not settle in {timeout_s}s: {rows}")


def chat(client: OpenAI, text: str, user: str, **headers: str) -> str:
    completion = client.chat.completions.create(
        model="agent", messages=[{"role": "user", "content": text}], user=user,
        max_tokens=60, temperature=0, extra_headers=headers or None,
    )  # fmt: skip
    return completion.choices[0].message.content or ""


@pytest.mark.parametrize("backend", ["mem0", "langmem", "letta"])
def test_fact_from_turn_one_is_used_in_turn_three(
    proxy_factory: Callable[..., ProxyProcess], relay: RecordingRelay, tmp_path: Path, backend: str
) -> None:
    """Each of the paper's three memory architectures, end to end through the proxy."""
    policy = write_policy(tmp_path / "policy.yaml", relay, mode="off", backend=backend)
    proxy = proxy_factory("--policy", str(policy), env={"DMT_ADMIN_KEY": ADMIN_KEY})
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    chat(client, "Please remember this: my sister's name is Zanele and she lives in Durban.", "u1")
    chat(client, "What is the chemical symbol of gold?", "u1")
    wait_settled(proxy, "u1", 2)
    answer = chat(client, "What is my sister's name?", "u1")
    upstream_prompt = json.dumps(relay.messages_of(-1))
    assert "Zanele" in upstream_prompt, "turn 1 was not retrieved into turn 3's prompt"
    assert "Zanele" in answer, f"the model did not use the memory: {answer!r}"
    # Another user sees nothing of it.
    chat(client, "What is my sister's name?", "u2")
    assert "Zanele" not in json.dumps(relay.messages_of(-1))


def test_biased_write_is_tagged_neutral_clean_and_tag_reaches_the_prompt(
    proxy_factory: Callable[..., ProxyProcess], relay: RecordingRelay, tmp_path: Path,
    local_model_base_url: Callable[[str], str],
) -> None:  # fmt: skip
    local_model_base_url("qwen2.5-1.5b")
    policy = write_policy(tmp_path / "policy.yaml", relay)
    proxy = proxy_factory("--policy", str(policy), env={"DMT_ADMIN_KEY": ADMIN_KEY})
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    chat(client, BIASED, "dmt-user")
    chat(client, NEUTRAL, "dmt-user")
    rows = {r["text"].split("\n")[0]: r for r in wait_settled(proxy, "dmt-user", 2)}
    biased = rows["User: " + BIASED]
    neutral = rows["User: " + NEUTRAL]
    assert neutral["audit_status"] == "clean", neutral
    assert biased["audit_status"] == "tagged", biased
    assert biased["tag"]["bias_type"] == "age"
    assert 0.5 <= biased["tag"]["score"] <= 1.0 and biased["tag"]["tendency"]
    chat(client, "Should I give my 60-year-old colleague the new software project?", "dmt-user")
    prompt = relay.messages_of(-1)[0]["content"]
    assert '"bias_tag"' in prompt and '"bias_type": "age"' in prompt
    assert "not as evidence" in prompt


def test_kill_9_with_pending_writes_loses_none(
    proxy_factory: Callable[..., ProxyProcess], relay: RecordingRelay, tmp_path: Path,
    local_model_base_url: Callable[[str], str],
) -> None:  # fmt: skip
    local_model_base_url("qwen2.5-1.5b")
    policy = write_policy(tmp_path / "policy.yaml", relay)
    state = tmp_path / "state"
    env = {"DMT_ADMIN_KEY": ADMIN_KEY}
    proxy = proxy_factory("--policy", str(policy), env=env, state_dir=state)
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    questions = [f"Question {i}: what is {i} plus {i}?" for i in range(4)]
    for q in questions:
        chat(client, q, "crash-user")
    proxy.kill()  # SIGKILL while the auditor is still busy with these writes
    with closing(sqlite3.connect(state / "outbox.sqlite3")) as db:
        pending = db.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
    assert pending > 0, "nothing was pending at the kill; the test proves nothing"
    restarted = proxy_factory("--policy", str(policy), env=env, state_dir=state, port=proxy.port)
    rows = wait_settled(restarted, "crash-user", len(questions))
    texts = sorted(r["text"].split("\n")[0] for r in rows)
    assert texts == sorted(f"User: {q}" for q in questions), "a write was lost or duplicated"


def test_audit_backfill_tags_memories_written_with_mode_off(
    proxy_factory: Callable[..., ProxyProcess], relay: RecordingRelay, tmp_path: Path,
    local_model_base_url: Callable[[str], str],
) -> None:  # fmt: skip
    import os
    import subprocess
    import sys

    local_model_base_url("qwen2.5-1.5b")
    policy = write_policy(tmp_path / "policy.yaml", relay, mode="off")
    state = tmp_path / "state"
    env = {"DMT_ADMIN_KEY": ADMIN_KEY}
    proxy = proxy_factory("--policy", str(policy), env=env, state_dir=state)
    client = OpenAI(base_url=proxy.base_url, api_key="unused")
    chat(client, BIASED, "old-user")
    chat(client, NEUTRAL, "old-user")
    assert {r["audit_status"] for r in wait_settled(proxy, "old-user", 2)} == {"unaudited"}
    proxy.stop()
    out = subprocess.run(
        [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "audit-backfill", "--user", "old-user",
         "--policy", str(policy)],
        env={**os.environ, "DMT_STATE_DIR": str(state)}, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    restarted = proxy_factory("--policy", str(policy), env=env, state_dir=state)
    rows = {r["text"].split("\n")[0]: r for r in admin_list(restarted, "old-user")}
    assert rows["User: " + BIASED]["audit_status"] == "tagged"
    assert rows["User: " + NEUTRAL]["audit_status"] == "clean"
