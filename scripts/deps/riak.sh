#!/usr/bin/env bash
# Riak KV 3.2.2 (OpenRiak, built offline from the source bundle in ../shared/riak or
# $RIAK_SRC_DIR) that the Riak store tests start for real; dynaq/testing/servers/riak.py
# runs it with the bundle's start.sh/stop.sh, copied next to the cached release.
# The build takes ~3 min on two cores the first time, then is cached in .cache/riak.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
SRC=${RIAK_SRC_DIR:-$(cd "$ROOT/.." && pwd)/shared/riak}
OUT="$ROOT/.cache/riak"
if [ ! -x "$SRC/build.sh" ] || [ ! -f "$SRC/riak-3.2.2p1-offline-src.tar.xz" ]; then
  echo "Riak cannot be built: no source bundle in $SRC (set RIAK_SRC_DIR to the folder" \
       "holding build.sh, start.sh, stop.sh and riak-3.2.2p1-offline-src.tar.xz)" >&2
  exit 1
fi
mkdir -p "$OUT/scripts"
if ! REL=$(RIAK_CACHE_DIR="$OUT" "$SRC/build.sh" | tail -n 1); then
  echo "Riak could not be built (Debian 12 with apt access or the erlang-* packages is" \
       "needed; see $SRC/README.md and the build log under $OUT)" >&2
  exit 1
fi
[ -x "$REL/bin/riak" ] || { echo "build.sh printed no release ($REL)" >&2; exit 1; }
cp "$SRC/start.sh" "$SRC/stop.sh" "$OUT/scripts/"
echo "$REL" > "$OUT/release"
