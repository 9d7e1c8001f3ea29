#!/usr/bin/env bash
# Static checks that CI runs before the tests: ruff lint, ruff format (check only) and
# mypy --strict on the package (configured in pyproject.toml). Run from anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck disable=SC1091
. .venv/bin/activate
paths=(dmt_proxy dmt_bench tests benchmarks deploy scripts)
echo "[lint] ruff check" >&2
ruff check "${paths[@]}"
echo "[lint] ruff format --check" >&2
ruff format --check "${paths[@]}"
echo "[lint] mypy --strict dmt_proxy dmt_bench" >&2
mypy dmt_proxy dmt_bench
