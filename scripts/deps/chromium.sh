#!/usr/bin/env bash
# Chromium and its WebDriver (Debian packages) for the web console's browser
# test (tests/system/test_console.py, selenium, headless). Idempotent.
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  if ! apt-cache show chromium-driver >/dev/null 2>&1; then
    apt-get update -qq
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver fonts-dejavu-core >/dev/null
  exit 0
fi
echo "Chromium is needed for the console test: apt-get install chromium chromium-driver" >&2
exit 1
