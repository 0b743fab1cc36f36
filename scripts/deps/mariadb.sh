#!/usr/bin/env bash
# MariaDB (Debian's packages) that `python -m bench batches` starts for real as the
# baseline of Carlyle's exact mode: dynaq/testing/servers/mariadb.py runs
# mariadb-install-db + mariadbd on a free 127.0.0.1 port in a throwaway dir.
# Idempotent: does nothing when the server, its bootstrap tool and the driver are there.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
have_mariadb() {
  { [ -x /usr/sbin/mariadbd ] || [ -x /usr/sbin/mysqld ]; } \
    && { command -v mariadb-install-db >/dev/null || command -v mysql_install_db >/dev/null; }
}
if ! have_mariadb; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    # Refresh the package lists only when the package is not known yet.
    if ! apt-cache show mariadb-server >/dev/null 2>&1; then
      apt-get update -qq
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      mariadb-server >/dev/null
    # The package may start a system service; the benchmark runs its own instance.
    if command -v systemctl >/dev/null && systemctl is-active --quiet mariadb 2>/dev/null; then
      systemctl stop mariadb || true
    fi
  else
    echo "the batches benchmark needs MariaDB (Carlyle's store): apt-get install mariadb-server" >&2
    exit 1
  fi
fi
# The server runs as the 'mysql' user the package creates when the harness is root.
if [ "$(id -u)" = 0 ] && ! id mysql >/dev/null 2>&1; then
  useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin mysql
fi
# The async driver normally comes with the test and bench extras; make sure.
if [ -n "${VENV:-}" ] && [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import asyncmy' 2>/dev/null; then
  "$VENV/bin/pip" install -q 'asyncmy>=0.2.9'
fi
have_mariadb || { echo "MariaDB was installed but mariadbd / mariadb-install-db are missing" >&2; exit 1; }
