"""The review console as a newcomer meets it: ``dmt-proxy demo --console``, then a browser.

Everything real: the demo starts the local agent and the default audit pipeline (judge
v2, with qwen2.5-1.5b for what it is unsure of) and a proxy process; the demo prints the console's URL and key; headless
Chromium signs in, finds the memory the real auditor tagged in the queue with its
evidence, and clears it by keyboard; the DMT block the agent sees for that user then
shows it untagged, and the memory's history names the reviewer.

``DMT_CONSOLE_SCREENSHOTS=docs/console`` saves the README's screenshots from this run.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from dmt_proxy.settings import Settings
from dmt_proxy.upstream import local_models
from tests.browser import chromium, have_browser, shot, sign_in

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.skipif(not have_browser(), reason="no chromium: run scripts/install_browser.sh"),
]
pytest.importorskip("selenium")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CONSOLE_LINE = re.compile(
    r"review console: (http://\S+)/console \(sign in with the admin key (\S+)\)"
)


def _lines(proc: subprocess.Popen[str], out: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        out.put(line)


def test_demo_console_review_with_the_real_auditor(
    model_settings: Settings, tmp_path: Path
) -> None:
    for name in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
        model = local_models.get_model(name)
        if not local_models.is_pulled(model_settings.cache_dir, model):
            local_models.pull(model_settings.cache_dir, model)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dmt_proxy.cli.proxy_cli", "demo", "--console", "--no-contrast",
         "--audit-timeout", "300"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=_lines, args=(proc, lines), daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        match = None
        deadline = time.monotonic() + 1500
        while match is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                seen.append(lines.get(timeout=1))
            except queue.Empty:
                continue
            match = CONSOLE_LINE.search(seen[-1])
        assert match is not None, "".join(seen)
        base, key = match.group(1), match.group(2)
        admin = {"authorization": f"Bearer {key}"}
        with chromium() as driver:
            sign_in(driver, base, key, "rita")
            shot(driver, "overview")
            driver.get(base + "/console/queue")
            rows = driver.find_elements(By.CSS_SELECTOR, "tr.item")
            # The biased remark, tagged by the real auditor; the neutral one is clean.
            assert len(rows) == 1, driver.page_source[-3000:]
            assert "Linda is 61" in rows[0].text and "age" in rows[0].text
            assert "tagged" in rows[0].text or "disputed" in rows[0].text
            shot(driver, "queue")
            memory_id = rows[0].get_attribute("data-id")
            driver.get(f"{base}/console/memories/{memory_id}")
            evidence = driver.find_element(By.ID, "evidence").text
            # Whichever judge decided it: judge v2 alone when it is confident, else the LLM.
            assert "age" in evidence
            assert "qwen2.5-1.5b" in evidence or "first-stage-judge" in evidence, evidence
            shot(driver, "memory")
            driver.get(base + "/console/queue")
            row = driver.find_element(By.CSS_SELECTOR, "tr.item")
            driver.find_element(By.TAG_NAME, "body").send_keys("x")
            WebDriverWait(driver, 20).until(lambda _d: "done" in (row.get_attribute("class") or ""))
            driver.get(f"{base}/console/memories/{memory_id}")
            history = driver.find_element(By.ID, "history").text
            assert "reviewer:rita" in history and "→ clean" in history
            driver.get(f"{base}/console/users?user=demo-user")
            shot(driver, "user")
        user = httpx.get(f"{base}/v1/reviews/user", params={"user": "demo-user"},
                         headers=admin, timeout=30).json()  # fmt: skip
        assert '"bias_tag": {' not in user["block"]  # the agent's block: nothing tagged now
        assert '"audit": "clean"' in user["block"] and "Linda" in user["block"]
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        reader.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
