"""Every ``DMT_*`` variable that deploy/ sets is one the code reads.

Settings reads field ``x`` from ``DMT_X`` (``Settings.from_env``); the only other
readers are the container scripts in deploy/docker/ (``${DMT_NAME...}``). A name
in deploy/ that neither reads is configuration the code silently ignores, as
``DMT_QDRANT_URL`` once was.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dmt_proxy.settings import Settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
NAME = re.compile(r"\bDMT_[A-Z0-9_]+\b")


def deploy_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.is_file() and p.suffix != ".json")


def read_by_settings() -> set[str]:
    return {f"DMT_{name.upper()}" for name in Settings.model_fields}


def read_by_scripts() -> set[str]:
    names: set[str] = set()
    for script in (DEPLOY / "docker").glob("*.sh"):
        names.update(re.findall(r"\$\{(DMT_[A-Z0-9_]+)", script.read_text()))
    return names


def test_settings_read_the_names_this_test_assumes() -> None:
    env = {"DMT_DATABASE_URL": "postgresql://x@h/db", "DMT_WORKER": "off", "DMT_PORT": "9"}
    settings = Settings.from_env(env)
    assert (settings.database_url, settings.worker, settings.port) == ("postgresql://x@h/db",
                                                                       False, 9)  # fmt: skip


@pytest.mark.parametrize("path", deploy_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_dmt_variable_in_deploy_is_read(path: Path) -> None:
    known = read_by_settings() | read_by_scripts()
    unknown = sorted(set(NAME.findall(path.read_text(errors="replace"))) - known)
    assert unknown == [], f"{path.relative_to(REPO)} sets {unknown}, which nothing reads"


def test_the_check_catches_an_ignored_name() -> None:
    assert "DMT_QDRANT_URL" not in read_by_settings() | read_by_scripts()
    assert "DMT_SERVE_MODELS" in read_by_scripts()
