#!/usr/bin/env bash
# Model-server container: pull the pinned GGUF models into the cache volume
# (a no-op once they are there) and serve each with llama.cpp's llama-server,
# in the foreground, with the same flags the proxy's own launcher uses plus
# --metrics for Prometheus. Exits when any server exits, so the container
# restart policy (or Kubernetes) brings the whole set back.
#
# Env: DMT_SERVE_MODELS (space-separated names, default "qwen2.5-0.5b qwen2.5-1.5b"),
#      DMT_MODELS_HOST (bind address; 0.0.0.0 in a container), DMT_MODELS_PORT_BASE,
#      DMT_CACHE_DIR, DMT_MODEL_THREADS, DMT_MODEL_PARALLEL.
set -euo pipefail

read -r -a names <<< "${DMT_SERVE_MODELS:-qwen2.5-0.5b qwen2.5-1.5b}"
dmt-proxy models pull "${names[@]}"

pids=()
stop_all() { kill -TERM "${pids[@]}" 2>/dev/null || true; }
trap stop_all TERM INT

for name in "${names[@]}"; do
    # Ask the launcher for the command so ports and flags never drift from it.
    mapfile -t cmd < <(python - "$name" <<'PY'
import sys

from dmt_proxy.settings import Settings
from dmt_proxy.upstream import launcher, local_models

settings = Settings.from_env()
print("\n".join(launcher.server_command(settings, local_models.get_model(sys.argv[1]))))
PY
)
    echo "models-entrypoint: starting ${cmd[*]} --metrics" >&2
    "${cmd[@]}" --metrics &
    pids+=("$!")
done

# First server to exit ends the container (non-zero so it is restarted).
set +e
wait -n
status=$?
stop_all
wait
echo "models-entrypoint: a llama-server exited (status $status)" >&2
exit $(( status == 0 ? 1 : status ))
