#!/usr/bin/env bash
# The PostgreSQL server the evidence-store tests start a throwaway cluster of
# (tests/fleet/pgcluster.py): Debian's `postgresql` package, installed only if
# no server binaries are present. Without root (or apt-get) the PostgreSQL
# tests skip and say why; nothing here starts a server.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing Debian postgresql for the evidence-store tests..."
  apt-get update -qq >/dev/null
  # the package's own cluster is not wanted: the tests initialise their own
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  if command -v pg_lsclusters >/dev/null 2>&1; then
    pg_lsclusters -h 2>/dev/null | while read -r version name _; do
      pg_ctlcluster "$version" "$name" stop >/dev/null 2>&1 || true
    done
  fi
else
  echo "warning: PostgreSQL is missing and cannot be installed (not root); the PostgreSQL evidence tests will be skipped" >&2
fi
