#!/usr/bin/env bash
# iproute2 (Debian package): the partition fault test builds network namespaces
# and veth pairs of its own with `ip netns` / `ip link` (it runs as root).
# Idempotent: does nothing when `ip` is there.
set -euo pipefail
if command -v ip >/dev/null || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ]; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if ! apt-cache show iproute2 >/dev/null 2>&1; then
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends iproute2 >/dev/null
  exit 0
fi
echo "the partition fault test needs iproute2: apt-get install iproute2" >&2
exit 1
