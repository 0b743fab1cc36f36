#!/usr/bin/env bash
# HAProxy (Debian package) that the cluster tests start in front of real nodes
# with config/haproxy.cfg. Idempotent: does nothing when haproxy is on PATH.
set -euo pipefail
if command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  # Refresh the package lists only when the package is not known yet.
  if ! apt-cache show haproxy >/dev/null 2>&1; then
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends haproxy >/dev/null
  # The package enables a system service; the tests run their own instance.
  if command -v systemctl >/dev/null && systemctl is-active --quiet haproxy 2>/dev/null; then
    systemctl stop haproxy || true
  fi
  exit 0
fi
echo "HAProxy is needed for the cluster tests: apt-get install haproxy" >&2
exit 1
