#!/usr/bin/env bash
# PostgreSQL (Debian's packages) that the outbox relay tests start for real:
# dynaq/testing/servers/postgres.py runs initdb + pg_ctl on a free port in a temp dir.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
have_pg() {
  ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
}
if ! have_pg; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "the outbox tests need PostgreSQL: apt-get install postgresql" >&2
    exit 1
  fi
fi
# The Debian package creates the cluster-less 'postgres' user the harness runs
# the server as (PostgreSQL refuses to run as root); make sure it exists.
if ! id postgres >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
fi
# The driver and its type stubs (mypy --strict) normally come with the test
# extra (dynaq[outbox] + asyncpg-stubs); make sure.
if [ -n "${VENV:-}" ] && [ -x "$VENV/bin/python" ]; then
  if ! "$VENV/bin/python" -c 'import asyncpg' 2>/dev/null; then
    "$VENV/bin/pip" install -q 'asyncpg>=0.29'
  fi
  purelib=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ ! -d "$purelib/asyncpg-stubs" ]; then
    "$VENV/bin/pip" install -q 'asyncpg-stubs>=0.29'
  fi
fi
have_pg
