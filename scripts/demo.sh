#!/usr/bin/env bash
# Install everything (first run: ~10-30 min, then seconds), start the embedded model
# and the proxy, send one real request through the proxy and print the answer.
#   bash scripts/demo.sh            one request through the proxy (dmt-proxy demo)
#   bash scripts/demo.sh compare    the quick simulation: no mitigation vs SSP vs DMT,
#                                   real local models behind a real proxy (~10-60 min
#                                   on 2 cores), prints the Table 2 shape
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [[ "${1:-}" == "compare" ]]; then
    shift
    .venv/bin/dmt-proxy models start qwen2.5-0.5b qwen2.5-1.5b
    exec .venv/bin/dmt-bench compare --ssp --dmt --quick "$@"
fi
exec .venv/bin/dmt-proxy demo "$@"
