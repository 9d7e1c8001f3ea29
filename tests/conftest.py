"""Shared fixtures.

Real local models: ``local_model_base_url("qwen2.5-0.5b")`` returns the
``/v1`` URL of a running llama-server for that model, starting it (once per
session) if it is not running. Servers started here are left running for the
rest of the session; ``.ci/run`` stops them at the end.

In-process apps: ``open_app`` (from ``dmt_proxy.testing.fixtures``) starts the real
app behind an ``httpx`` client and shuts it down after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dmt_proxy.settings import Settings
from dmt_proxy.testing.fixtures import open_app
from dmt_proxy.testing.pg_fixtures import pg_cluster, pg_dsn  # noqa: F401  (PostgreSQL fixtures)
from dmt_proxy.upstream import launcher, local_models
from dmt_proxy.upstream.models import local_api_base
from tests.proxy_process import ProxyProcess

__all__ = ["open_app"]  # a fixture: pytest finds it here


@pytest.fixture(scope="session")
def model_settings() -> Settings:
    """Settings for the local model servers (shared state dir, default ports)."""
    return Settings.from_env()


@pytest.fixture(scope="session")
def local_model_base_url(model_settings: Settings) -> Callable[[str], str]:
    def ensure(name: str) -> str:
        model = local_models.get_model(name)
        if not local_models.is_pulled(model_settings.cache_dir, model):
            local_models.pull(model_settings.cache_dir, model)
        launcher.start(model_settings, model, wait_s=300)
        return local_api_base(model_settings, model.name)

    return ensure


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir()
    return path


@pytest.fixture
def proxy_factory(tmp_path: Path) -> Iterator[Callable[..., ProxyProcess]]:
    """Start real proxy processes; all are stopped at the end of the test."""
    started: list[ProxyProcess] = []

    def start(*args: str, state_dir: Path | None = None, env: dict[str, str] | None = None,
              port: int = 0) -> ProxyProcess:  # fmt: skip
        proxy = ProxyProcess(state_dir=state_dir or tmp_path / "proxy-state", env=env, port=port)
        started.append(proxy.start(*args))
        return proxy

    yield start
    for proxy in started:
        proxy.stop()
