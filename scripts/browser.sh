#!/usr/bin/env bash
# The browser the dashboard's browser tests drive (tests/dashboard/test_browser_*.py): the
# system's Chromium, through Playwright's Python package (never `playwright install`, which
# downloads a browser of its own). Installed with apt-get where it is missing and this is root;
# elsewhere the browser tests skip, unless FUSEFORGE_REQUIRE_BROWSER=1 (CI) makes that an error.
set -euo pipefail

log() { echo "browser: $*"; }

chromium_path() { command -v chromium || command -v chromium-browser || true; }

if [ -n "$(chromium_path)" ]; then
  exit 0  # already there: say nothing
fi

if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
  log "installing chromium (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq chromium >/dev/null
  [ -n "$(chromium_path)" ] || { log "apt-get installed chromium but no chromium command exists"; exit 1; }
  log "$("$(chromium_path)" --version 2>/dev/null || echo chromium) installed"
elif [ "${FUSEFORGE_REQUIRE_BROWSER:-0}" = 1 ]; then
  log "no chromium, and it cannot be installed here (need root and apt-get)"; exit 1
else
  log "no chromium (install it: apt-get install chromium): the dashboard's browser tests will skip"
fi
