#!/usr/bin/env bash
# Make headless Chromium and its WebDriver available to the review console's browser
# tests (tests/integration/test_console_browser.py): Debian's own packages, chromium
# and chromium-driver (/usr/bin/chromium, /usr/bin/chromedriver). Selenium (the dev
# extra) drives the system driver and downloads nothing.
#
# Idempotent: when both binaries are there it only says so. Needs root (or sudo) for
# apt-get the first time; without either it says what to install and fails.
#
# Usage: scripts/install_browser.sh
set -euo pipefail
log() { echo "install_browser: $*" >&2; }

if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  log "$(chromium --version 2>/dev/null | head -1) and chromedriver present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    log "error: run as root or install: apt-get install -y chromium chromium-driver"; exit 2
  fi
fi
log "installing chromium and chromium-driver from the distribution"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium chromium-driver >/dev/null
log "$(chromium --version 2>/dev/null | head -1) installed"
