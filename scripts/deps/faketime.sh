#!/usr/bin/env bash
# libfaketime (Debian packages faketime + libfaketime): the clock-fault tests
# run node processes with LD_PRELOAD=libfaketime.so.1 and FAKETIME=-1h / +1h.
# Idempotent: does nothing when the library is there.
set -euo pipefail
for lib in /usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1 \
           /usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1 \
           /usr/lib/faketime/libfaketime.so.1; do
  [ -f "$lib" ] && exit 0
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if ! apt-cache show libfaketime >/dev/null 2>&1; then
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends faketime libfaketime >/dev/null
  exit 0
fi
echo "the clock-fault tests need libfaketime: apt-get install faketime libfaketime" >&2
exit 1
