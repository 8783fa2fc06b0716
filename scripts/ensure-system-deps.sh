#!/usr/bin/env bash
# System packages the test suite needs that pip and npm cannot provide:
# Debian's chromium (HTML report rendering test), tmux (the interactive Codex
# approval probe under make stress) and bubblewrap (the sandbox
# that confines harness CLIs and stdio upstreams under a strict run policy,
# docs/confinement.md). Installed only if missing.
set -euo pipefail
if ! command -v bwrap >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian bubblewrap for the confinement tests..."
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
  else
    echo "warning: bubblewrap (bwrap) is missing and cannot be installed (not root); strict runs will refuse to start unconfined and the confinement tests will fail" >&2
  fi
fi
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian chromium for the HTML report test..."
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "warning: chromium is missing and cannot be installed (not root); the HTML render test will fail" >&2
  fi
fi
# tmux: `make stress` drives Codex's interactive TUI through an approval form
# (tests/harness/test_codex_tui_elicitation.py, scripts/probe-codex-elicitation.sh)
if ! command -v tmux >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian tmux for the interactive Codex approval probe..."
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq tmux >/dev/null
  else
    echo "warning: tmux is missing and cannot be installed (not root); the interactive Codex approval probe (make stress) will be skipped" >&2
  fi
fi
