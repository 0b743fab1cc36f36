#!/usr/bin/env bash
# Spark in local mode for the PySpark data source tests: pyspark + pyarrow come
# from the virtualenv's "spark" extra (part of "test"); Spark itself needs a
# Java 17+ runtime. Installs Debian's headless JRE when java is missing.
set -euo pipefail
ROOT=${ROOT:-$(cd "$(dirname "$0")/../.." && pwd)}
VENV=${VENV:-$ROOT/.venv}

java_major() { java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }

if ! command -v java >/dev/null || [ "$(java_major)" -lt 17 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    if ! apt-cache show openjdk-17-jre-headless >/dev/null 2>&1; then apt-get update -qq; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null
  else
    echo "Spark needs Java 17+: apt-get install openjdk-17-jre-headless" >&2
    exit 1
  fi
fi

if [ -x "$VENV/bin/python" ] && ! "$VENV/bin/python" -c 'import pyspark, pyarrow' >/dev/null 2>&1; then
  echo "installing pyspark + pyarrow (pyspark builds from a large sdist the first time)" >&2
  "$VENV/bin/pip" install -q 'pyspark>=4.2' 'pyarrow>=15'
fi
