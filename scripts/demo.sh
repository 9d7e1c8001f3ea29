#!/usr/bin/env bash
# Install everything (first run: ~10-30 min, then seconds), start the embedded model
# and the proxy, send one real request through the proxy and print the answer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/dmt-proxy demo "$@"
