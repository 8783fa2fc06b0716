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

# DeepSeek Harness (dsh): a PyPI wheel holding one native executable (~95 MB to
# download, ~320 MB unpacked). It gets its own small venv in the cache, keyed by
# version, so the project venv stays lean; the wheel itself is downloaded once
# into the cache's wheelhouse and installed from there (offline after that).
# .dsh links to the venv (git-ignored); sharedos finds `dsh` at .dsh/bin/dsh.
DSH_VERSION="0.2.1rc2"
dsh_wheels="$cache_root/wheels"
dsh_venv="$cache_root/dsh/$DSH_VERSION"
if [ ! -f "$dsh_venv/.complete" ]; then
  py="${PYTHON:-python3}"
  mkdir -p "$dsh_wheels"
  if ! ls "$dsh_wheels"/deepseek_harness_runtime_bin-"$DSH_VERSION"-*.whl >/dev/null 2>&1; then
    "$py" -m pip download --quiet --no-deps --only-binary=:all: \
      --dest "$dsh_wheels" "deepseek-harness-runtime-bin==$DSH_VERSION"
  fi
  # a venv is not relocatable (its scripts name their interpreter), so it is built in
  # place; .complete marks a finished one and anything else is rebuilt
  rm -rf "$dsh_venv"
  "$py" -m venv --without-pip "$dsh_venv"
  "$py" -m pip --quiet --python "$dsh_venv/bin/python" install --no-index --no-deps \
    --find-links "$dsh_wheels" "deepseek-harness-runtime-bin==$DSH_VERSION"
  touch "$dsh_venv/.complete"
fi
if [ -L .dsh ] || [ ! -e .dsh ]; then
  ln -sfn "$dsh_venv" .dsh
else
  echo ".dsh exists and is not a symlink; remove it to re-link" >&2
  exit 1
fi
