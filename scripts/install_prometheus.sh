#!/usr/bin/env bash
# Install Prometheus (server + promtool) and amtool from Debian's `prometheus`
# and `prometheus-alertmanager` packages.
#
# Idempotent: does nothing when `promtool`, `prometheus` and `amtool` are on PATH.
# Non-interactive (DEBIAN_FRONTEND=noninteractive). The package's maintainer
# scripts would normally start a server on :9090; that would collide with the
# test servers, so service starts are blocked during the install (policy-rc.d)
# and any unit the package enabled is disabled and stopped afterwards.
#
# Usage: scripts/install_prometheus.sh        (as root, or with password-less sudo)
set -euo pipefail

log() { echo "install_prometheus: $*" >&2; }

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1 \
    && command -v amtool >/dev/null 2>&1; then
    log "already installed: $(promtool --version 2>&1 | head -n1)"
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO=(sudo -n)
else
    log "error: needs root (or password-less sudo) to run apt-get"
    exit 2
fi

if ! command -v apt-get >/dev/null 2>&1; then
    log "error: apt-get not found; install Prometheus 2.x by other means (promtool must be on PATH)"
    exit 2
fi

export DEBIAN_FRONTEND=noninteractive
POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    # Only remove the policy file if this script created it.
    if [ "$created_policy" -eq 1 ]; then
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}
trap cleanup EXIT

if [ ! -e "$POLICY" ]; then
    # exit 101 = "action forbidden": invoke-rc.d will not start the service.
    printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    created_policy=1
fi

log "apt-get update"
"${SUDO[@]}" apt-get update -qq
log "apt-get install prometheus prometheus-alertmanager"
"${SUDO[@]}" apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager \
    >/dev/null

# On hosts running systemd the unit may have been enabled anyway: tests start
# their own servers on their own ports, so keep the packaged one off.
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    for unit in prometheus.service prometheus-alertmanager.service; do
        "${SUDO[@]}" systemctl disable --now "$unit" >/dev/null 2>&1 || true
    done
fi

for tool in promtool prometheus amtool; do
    command -v "$tool" >/dev/null 2>&1 || { log "error: $tool missing after install"; exit 1; }
done
log "installed: $(promtool --version 2>&1 | head -n1)"
