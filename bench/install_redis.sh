#!/usr/bin/env bash
# redis-server for bench/remote.py: Debian's package (redis-server), installed with apt-get
# when it is not on the PATH. Needs root; elsewhere install Redis 7 by your system's means.
set -euo pipefail
if command -v redis-server >/dev/null 2>&1; then
    redis-server --version
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "bench/remote.py needs redis-server: as root on Debian, apt-get install redis-server" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q redis-server
# The package starts a system-wide server on port 6379; the bench starts its own on a free
# port, so that one is not needed.
if command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now redis-server >/dev/null 2>&1 || true
fi
redis-server --version
