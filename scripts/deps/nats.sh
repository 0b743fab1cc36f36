#!/usr/bin/env bash
# NATS server with JetStream (Debian package "nats-server"), the peer that
# `python -m bench queue` measures dynaq against, plus the nats-py client in
# the virtualenv. Idempotent: does nothing when both are present.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
VENV=${VENV:-$ROOT/.venv}

if ! command -v nats-server >/dev/null && [ ! -x /usr/sbin/nats-server ] && [ ! -x /usr/bin/nats-server ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # Refresh the package lists only when the package is not known yet.
    if ! apt-cache show nats-server >/dev/null 2>&1; then
      apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nats-server >/dev/null
    # The package may enable a system service; the benchmark runs its own instance.
    if command -v systemctl >/dev/null && systemctl is-active --quiet nats-server 2>/dev/null; then
      systemctl stop nats-server || true
    fi
  else
    echo "nats-server is needed for the queue benchmark: apt-get install nats-server" >&2
    exit 1
  fi
fi

# The client lives in the "bench" extra; install it when the venv lacks it.
if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import nats' >/dev/null 2>&1; then
  "$VENV/bin/pip" install -q 'nats-py>=2.6'
fi
