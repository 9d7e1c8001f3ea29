#!/usr/bin/env bash
# Run the whole test suite, real models included: installs what is missing first
# (scripts/setup.sh), runs the static checks (scripts/lint.sh: ruff, ruff format,
# mypy --strict), then pytest. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -f scripts/install_prometheus.sh ]; then bash scripts/install_prometheus.sh; fi
bash scripts/lint.sh
if [ -f scripts/install_postgres.sh ]; then bash scripts/install_postgres.sh; fi
if [ -f scripts/install_browser.sh ]; then bash scripts/install_browser.sh; fi
# shellcheck disable=SC1091
. .venv/bin/activate

# Model servers the tests start are stopped afterwards; ones already running are left alone.
running_before="$(dmt-proxy models status | awk 'NR>1 && $4=="True" {print $1}')"
cleanup() {
  for name in qwen2.5-0.5b qwen2.5-1.5b smollm2; do
    if ! grep -qx "$name" <<<"$running_before"; then dmt-proxy models stop "$name" >/dev/null 2>&1 || true; fi
  done
}
trap cleanup EXIT
python -m pytest "$@"
