#!/usr/bin/env bash
# dynaq's entry point.
#   ./setup.sh run    set up .venv and run a node on the embedded store (config/dynaq.toml)
#   ./setup.sh test   set up everything the test suite needs and run the whole suite
# Extra arguments after `test` go to pytest.
set -euo pipefail
cd "$(dirname "$0")"
ROOT=$(pwd)
VENV="$ROOT/.venv"
PY=${PYTHON:-python3}

say() { printf '\033[1m[setup]\033[0m %s\n' "$*" >&2; }
die() { printf '\033[31m[setup] %s\033[0m\n' "$*" >&2; exit 1; }

need_python() {
  command -v "$PY" >/dev/null || die "python3 (3.11+) is required: apt-get install python3 python3-venv"
  "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' \
    || die "dynaq needs Python 3.11+; found $("$PY" --version 2>&1)"
}

venv() {
  need_python
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating virtualenv in .venv"
    "$PY" -m venv "$VENV" || die "could not create a virtualenv: apt-get install python3-venv"
  fi
  local stamp="$VENV/.installed-$1" want
  want=$(cat pyproject.toml | sha1sum | cut -c1-12)
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    say "installing dynaq[$1] into .venv"
    "$VENV/bin/pip" install -q --upgrade pip >/dev/null
    "$VENV/bin/pip" install -q -e ".[$1]" || die "pip install failed (see above)"
    echo "$want" > "$stamp"
  fi
}

case "${1:-}" in
  run)
    shift
    venv run
    mkdir -p data
    "$VENV/bin/dynaq" migrate --config config/dynaq.toml
    exec "$VENV/bin/dynaq" server --config config/dynaq.toml "$@"
    ;;
  test)
    shift
    venv test
    # Each scripts/deps/*.sh installs (or checks) one external part the suite
    # starts for real: a Debian package, an npm server, a Spark toolchain.
    for dep in scripts/deps/*.sh; do
      [ -e "$dep" ] || continue
      say "dependency: $(basename "$dep" .sh)"
      VENV="$VENV" ROOT="$ROOT" bash "$dep" || die "dependency $(basename "$dep" .sh) could not be installed"
    done
    export PATH="$VENV/bin:$PATH"
    say "lint: ruff + mypy"
    "$VENV/bin/ruff" check .
    "$VENV/bin/ruff" format --check .
    "$VENV/bin/mypy" dynaq tests bench examples
    say "tests"
    exec "$VENV/bin/pytest" "$@"
    ;;
  *)
    echo "usage: ./setup.sh run | test [pytest args]" >&2
    exit 2
    ;;
esac
