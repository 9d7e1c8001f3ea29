"""Headless Chromium for the console's browser tests (one helper, used by integration and e2e).

Debian's chromium and chromedriver (scripts/install_browser.sh), driven by Selenium
through the system driver; nothing is downloaded. Screenshots go to
``$DMT_CONSOLE_SCREENSHOTS`` when it is set (the README's come from there).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--window-size=1360,900",
)  # fmt: skip


def have_browser() -> bool:
    """Whether Chromium and its driver are installed (CI installs them: never skipped there)."""
    return (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()) or bool(os.environ.get("CI"))


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium session with a fresh profile, closed afterwards."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="dmt-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.implicitly_wait(5)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def shot(driver: Any, name: str) -> None:
    """Save a screenshot of the page as ``<name>.png`` when ``DMT_CONSOLE_SCREENSHOTS`` is set."""
    target = os.environ.get("DMT_CONSOLE_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(Path(target) / f"{name}.png"))


def sign_in(driver: Any, base_url: str, key: str, name: str, *, screenshot: bool = True) -> None:
    """Open the queue, land on the sign-in form, sign in, arrive at the overview."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(base_url + "/console/queue")
    assert driver.current_url.endswith("/console/login"), driver.current_url
    if screenshot:
        shot(driver, "login")
    driver.find_element(By.ID, "name").send_keys(name)
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "sign-in").click()
    WebDriverWait(driver, 10).until(
        lambda d: d.current_url.rstrip("/").endswith("/console"),
        message=f"sign-in did not reach /console: {driver.current_url}",
    )
