#!/usr/bin/env bash
# Install the pinned npm tools listed in tools/package.json into .tools/
# (git-ignored). The install itself lives in a cache keyed by the hash of
# package.json (so a fresh clone on the same machine does not download ~1 GB
# again); .tools is a symlink to it. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
key=$(cat tools/package.json tools/package-lock.json 2>/dev/null | sha256sum | cut -c1-16)
cache_root="${SHAREDOS_TOOLS_CACHE:-${XDG_CACHE_HOME:-${HOME:-/var/tmp}/.cache}/sharedos/tools}"
cache="$cache_root/$key"
if [ ! -f "$cache/.complete" ]; then
  rm -rf "$cache.partial"
  mkdir -p "$cache.partial"
  cp tools/package.json "$cache.partial/package.json"
  if [ -f tools/package-lock.json ]; then cp tools/package-lock.json "$cache.partial/package-lock.json"; fi
  if [ -f "$cache.partial/package-lock.json" ]; then
    # the lockfile pins every transitive version; npm ci installs exactly it
    (cd "$cache.partial" && npm ci --no-audit --no-fund --loglevel=error)
  else
    (cd "$cache.partial" && npm install --no-audit --no-fund --loglevel=error)
  fi
  rm -rf "$cache"
  mv "$cache.partial" "$cache"
  touch "$cache/.complete"
fi
if [ -L .tools ] || [ ! -e .tools ]; then
  ln -sfn "$cache" .tools
else
  echo ".tools exists and is not a symlink; remove it to re-link" >&2
  exit 1
fi
