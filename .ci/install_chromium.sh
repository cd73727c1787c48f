#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser tests (the tox env dashboard): Debian's
# package, installed when missing. Playwright's own browser builds are never downloaded.
set -euo pipefail
if [ -n "${MQCORE_CHROMIUM:-}" ] || command -v chromium >/dev/null 2>&1 \
    || command -v chromium-browser >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "the dashboard tests need Chromium: install Debian's (apt-get install chromium)," \
        "or set MQCORE_CHROMIUM to a Chromium binary" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q chromium
