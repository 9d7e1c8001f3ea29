"""The review console in a real browser: headless Chromium (Debian's, installed by
scripts/install_browser.sh) driven by Selenium through the system chromedriver.

A real proxy app served by uvicorn on a free port, with the shipped fakes for the
parts that are not under test (in-memory backend, ScriptedAuditor tagging memories
about age, scripted chat model recording the prompts the agent receives).

Screenshots of each page go to ``$DMT_CONSOLE_SCREENSHOTS`` when it is set
(``DMT_CONSOLE_SCREENSHOTS=docs/console pytest tests/integration/test_console_browser.py``
refreshes the ones the README shows).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from dmt_proxy.api import create_app
from dmt_proxy.memory.backends.in_memory import InMemoryBackend
from dmt_proxy.net import free_port
from dmt_proxy.policy import parse_policy
from dmt_proxy.settings import Settings
from dmt_proxy.testing.auditor import ScriptedAuditor
from dmt_proxy.testing.chat import ScriptedChatModel
from tests.browser import chromium, have_browser, shot
from tests.browser import sign_in as browser_sign_in
from tests.unit.test_review import judge

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not have_browser(), reason="no chromium: run scripts/install_browser.sh"),
]
pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

ADMIN = {"authorization": "Bearer admin-key"}
REMARKS = [
    "Linda is 61, and people over 60 never really get new technology.",
    "Older workers are too slow for our startup, over 60 they just slow us down.",
    "My grandmother at 80 is too old to learn anything new.",
    "What is the difference between a task and a milestone?",
]


@dataclass
class Live:
    url: str
    app: Any
    chat: ScriptedChatModel


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Live]:
    settings = Settings.from_env({}, state_dir=tmp_path / "state", admin_key="admin-key")
    # The scripted judge alone (the first stage, on by default, is not under test).
    policy = parse_policy({"version": 1, "mode": "dmt", "memory": {"backend": "memory"},
                           "audit": {"first_stage": "off"}})  # fmt: skip
    chat = ScriptedChatModel(["noted"])
    app = create_app(settings, policy=policy, upstream=chat, memory_backend=InMemoryBackend(),
                     auditor=ScriptedAuditor(judge))  # fmt: skip
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.started
    url = f"http://127.0.0.1:{port}"
    with httpx.Client(base_url=url, headers=ADMIN) as c:
        for text in REMARKS:
            c.post("/v1/memories", json={"user": "dana", "query": text, "answer": "ok"})
        for _ in range(200):
            if c.get("/v1/admin/outbox").json()["depth"] == 0:
                break
            time.sleep(0.05)
    yield Live(url=url, app=app, chat=chat)
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def browser() -> Iterator[Any]:
    with chromium() as driver:
        yield driver


def sign_in(driver: Any, live: Live) -> None:
    browser_sign_in(driver, live.url, "admin-key", "rita")


def block_entries(block: str) -> list[dict[str, Any]]:
    """The memories of a rendered memory block (its JSON array)."""
    entries: list[dict[str, Any]] = json.loads(
        block[block.index("\n[") + 1 : block.rindex("]") + 1]
    )
    return entries


def queue_rows(driver: Any) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, "tr.item"))


def test_review_a_tagged_memory_end_to_end(live: Live, browser: Any) -> None:
    """Sign in; the queue shows the tagged memory; clear it by keyboard; the agent's next
    memory block shows it untagged; the history says who did it."""
    sign_in(browser, live)
    shot(browser, "overview")
    browser.get(live.url + "/console/queue")
    rows = queue_rows(browser)
    assert len(rows) == 3  # the three remarks about age; the neutral one is clean
    shot(browser, "queue")
    target = rows[0].get_attribute("data-id")
    assert "tagged" in rows[0].text
    body = browser.find_element(By.TAG_NAME, "body")
    body.send_keys("x")  # clear the selected (first) memory
    WebDriverWait(browser, 10).until(lambda d: "done" in (rows[0].get_attribute("class") or ""))
    assert "clean" in rows[0].text

    with httpx.Client(base_url=live.url) as c:
        live.chat.calls.clear()
        c.post("/v1/chat/completions", json={"model": "local/smollm2", "user": "dana",
               "messages": [{"role": "user", "content": "Linda is 61, people over 60 and new technology: who leads?"}]})  # fmt: skip
    system = [m["content"] for m in live.chat.calls[-1].wire_messages() if m["role"] == "system"]
    entries = [e for block in system if "<memories-" in block for e in block_entries(block)]
    detail = httpx.get(f"{live.url}/v1/memories/{target}/evidence", headers=ADMIN).json()
    cleared = [e for e in entries if e["text"] == detail["memory"]["text"]]
    assert len(cleared) == 1 and cleared[0]["audit"] == "clean" and "bias_tag" not in cleared[0]
    assert any("bias_tag" in e for e in entries)  # the other remarks are still tagged

    browser.get(f"{live.url}/console/memories/{target}")
    history = browser.find_element(By.ID, "history").text
    assert "reviewer:rita" in history and "clear" in history and "tagged → clean" in history
    shot(browser, "memory")
    browser.get(f"{live.url}/console/users?user=dana")
    assert "dana" in browser.find_element(By.TAG_NAME, "h1").text
    shot(browser, "user")


def test_keyboard_only_review_of_three_memories(live: Live, browser: Any) -> None:
    sign_in(browser, live)
    browser.get(live.url + "/console/queue")
    rows = queue_rows(browser)
    ids = [r.get_attribute("data-id") for r in rows]
    assert len(ids) == 3
    body = browser.find_element(By.TAG_NAME, "body")
    for key, row in zip("cxc", rows, strict=True):
        body.send_keys(key)
        WebDriverWait(browser, 10).until(
            lambda _d, r=row: "done" in (r.get_attribute("class") or "")
        )
    with httpx.Client(base_url=live.url, headers=ADMIN) as c:
        statuses = [c.get(f"/v1/memories/{i}").json()["audit_status"] for i in ids]
        assert statuses == ["tagged", "clean", "tagged"]
        actions = [c.get(f"/v1/memories/{i}/evidence").json()["history"][-1] for i in ids]
    assert [a["action"] for a in actions] == ["confirm", "clear", "confirm"]
    assert {a["actor"] for a in actions} == {"reviewer:rita"}


def test_hostile_memory_does_not_run_in_the_browser(live: Live, browser: Any) -> None:
    with httpx.Client(base_url=live.url, headers=ADMIN) as c:
        hostile = ("<script>document.title='pwned'</script><img src=x onerror=\"document.title="
                   "'pwned'\"> people over 60 \u202eevil")  # fmt: skip
        mid = c.post("/v1/memories", json={"user": "eve", "query": hostile, "answer": "ok"}).json()[
            "id"
        ]
        for _ in range(200):
            if c.get("/v1/admin/outbox").json()["depth"] == 0:
                break
            time.sleep(0.05)
    sign_in(browser, live)
    for path in (f"/console/memories/{mid}", "/console/queue", "/console/users?user=eve"):
        browser.get(live.url + path)
        assert browser.title != "pwned", path
        assert browser.find_elements(By.CSS_SELECTOR, "main img") == []
    browser.get(f"{live.url}/console/memories/{mid}")
    text = browser.find_element(By.ID, "memory-text").text
    assert "<script>" in text and "\u27e6U+202E\u27e7" in text
