#!/usr/bin/env bash
# Install everything (first run: ~10-30 min, then seconds), then show the proxy at work
# with the embedded agent and auditor models (dmt-proxy demo, under a minute once set up):
# one user says a neutral and a biased remark, the auditor's verdicts arrive, and a later
# question is answered with the retrieved memories and their bias tag in the prompt; then
# (in a terminal) the proxy stays up for its review console, whose URL it prints.
#   bash scripts/demo.sh            the demo (flags: dmt-proxy demo --help)
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
# Run from a terminal, the demo then keeps its proxy up and prints the review console's URL.
if [ -t 1 ]; then set -- --console "$@"; fi
exec .venv/bin/dmt-proxy demo "$@"
