#!/usr/bin/env bash
# Redis (Debian's package "redis-server") that `python -m bench batches` starts for real
# as the baseline of Carlyle's estimated mode (a DECRBY counter per batch):
# dynaq/testing/servers/redis.py runs redis-server on a free 127.0.0.1 port in a throwaway dir.
# Idempotent: does nothing when the server and the driver are there.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
have_redis() {
  command -v redis-server >/dev/null || [ -x /usr/bin/redis-server ]
}
if ! have_redis; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if ! apt-cache show redis-server >/dev/null 2>&1; then
      apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      redis-server >/dev/null
    if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
      systemctl stop redis-server || true
    fi
  else
    echo "the batches benchmark needs Redis (Carlyle's counter store): apt-get install redis-server" >&2
    exit 1
  fi
fi
# The asyncio client (redis-py) normally comes with the test and bench extras; make sure.
if [ -n "${VENV:-}" ] && [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import redis.asyncio' 2>/dev/null; then
  "$VENV/bin/pip" install -q 'redis>=5.0'
fi
have_redis || { echo "redis-server was installed but is not on PATH" >&2; exit 1; }
