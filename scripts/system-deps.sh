#!/bin/sh
# Installs the Debian packages the test suite uses, when missing and when we may (root + apt).
set -e
missing=""
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing:$missing"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
else
  echo "note: missing$missing; tests that need it will be skipped" >&2
fi
