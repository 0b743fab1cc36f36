#!/usr/bin/env bash
# The statsd daemon (npm "statsd") that the metrics tests send to.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DIR="$ROOT/.cache/statsd"
if [ -f "$DIR/node_modules/statsd/stats.js" ]; then
  exit 0
fi
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "node and npm are needed for the statsd daemon: apt-get install nodejs npm" >&2
  exit 1
fi
mkdir -p "$DIR"
cd "$DIR"
npm install --no-audit --no-fund --loglevel=error statsd@0.9.0
