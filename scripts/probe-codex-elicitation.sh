#!/usr/bin/env bash
# Probe: can a person answer SharedOS's approval question in Codex's interactive TUI?
#
# Issue 28 asks, for approvals, that a CLI whose elicitation can only be answered
# interactively be driven in a terminal with tmux. This script does that for the
# pinned Codex (.tools), offline: the real `sharedos run` (scripted model on
# 127.0.0.1, HTTP turn bridge, shipped rules and `dev-open` run policy) launches
# Codex, but through a small launcher that starts Codex's *interactive* TUI in a
# detached tmux session instead of `codex exec`. The turn's principal is alice
# with the role maintainer; the scripted model calls
# files.write(/home/alice/release/notes.txt), which `rules/files.sos` puts under
# `require approval by role "maintainer"` — so the bridge asks Codex's client
# (MCP elicitation) and the person at the TUI can answer.
#
# Scenarios (each its own turn, sandbox and evidence store):
#   yolo     Codex as SharedOS launches it for an open run policy
#            (--dangerously-bypass-approvals-and-sandbox), interactive
#   accept   --ask-for-approval on-request; the person allows Codex's own tool
#            prompt, then answers the SharedOS form with "True"
#   false    the same; the person answers the form with "False"
#   esc      the same; the person presses Esc on the form (cancel)
#
# Prints for each scenario the pane excerpt it saw, the evidence rows
# (`sharedos evidence list`), the approvals (`sharedos approvals list --status
# all`), whether the file was written, and one `RESULT` line. Exit 0 when every
# scenario was observed to its end (whatever Codex did), 2 when the TUI could not
# be driven (a screen it waited for never came), 3 when something it needs is
# missing. No network beyond 127.0.0.1 (Codex's config turns off everything that
# calls home; see sharedos/harness/adapters/codex.py).
#
# Usage: scripts/probe-codex-elicitation.sh [SCENARIO ...]   (default: all four)
# Env:   CODEX=path to codex (default .tools/node_modules/.bin/codex),
#        TRANSPORT=http|stdio (default http: the host file's [harness.codex] transport),
#        KEEP=1 keeps the scratch directory, WAIT=seconds per screen (default 60).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
sos="$root/.venv/bin/sharedos"
codex="${CODEX:-$root/.tools/node_modules/.bin/codex}"
wait_s="${WAIT:-60}"
transport="${TRANSPORT:-http}"
case $transport in http | stdio) ;; *) echo "probe: TRANSPORT is http or stdio" >&2; exit 3 ;; esac
scenarios=("$@")
[ ${#scenarios[@]} -gt 0 ] || scenarios=(yolo accept false esc)

for need in "$sos" "$codex"; do
  [ -x "$need" ] || { echo "probe: $need not found (run: make venv tools)" >&2; exit 3; }
done
command -v tmux >/dev/null || { echo "probe: tmux is not installed" >&2; exit 3; }

scratch=$(mktemp -d "${TMPDIR:-/tmp}/probe-codex-elicitation.XXXXXX")
chmod 700 "$scratch"
run_pid=""
cleanup() {
  for sock in "$scratch"/*/tmux.sock; do
    [ -S "$sock" ] && tmux -S "$sock" kill-server 2>/dev/null || true
  done
  if [ -n "$run_pid" ] && kill -0 "$run_pid" 2>/dev/null; then kill "$run_pid" 2>/dev/null || true; fi
  if [ "${KEEP:-0}" = 1 ]; then echo "probe: scratch kept in $scratch" >&2; else rm -rf "$scratch"; fi
}
trap cleanup EXIT

# The launcher SharedOS runs as "codex". `sharedos run` calls it twice: with
# --version (passed through: the version is recorded in the turn's identity) and
# with `exec ... -C WORK PROMPT`, which becomes the interactive `codex ... -C WORK
# PROMPT` in a detached tmux session; the launcher then waits for that session to
# end, so the turn stays open while the person answers. The environment SharedOS
# built (CODEX_HOME with its config.toml, the bridge token) reaches Codex because
# this launcher starts the tmux server, which inherits it.
launcher="$scratch/codex-in-tmux.sh"
cat >"$launcher" <<'EOF'
#!/usr/bin/env bash
set -u
sock=$1 mode=$2 codex=$3
shift 3
[ "${1:-}" = exec ] || exec "$codex" "$@"
shift
args=()
while [ $# -gt 0 ]; do
  case $1 in
    --skip-git-repo-check | --ephemeral | --json) ;;  # exec-only flags
    --dangerously-bypass-approvals-and-sandbox)
      if [ "$mode" = yolo ]; then args+=("$1"); else args+=(--ask-for-approval on-request); fi ;;
    *) args+=("$1") ;;
  esac
  shift
done
# The TUI's first-run screen asks to sign in; a placeholder key (never sent
# anywhere: the provider is the scripted model on 127.0.0.1) skips it.
echo offline-placeholder | "$codex" login --with-api-key >/dev/null 2>&1
tmux -S "$sock" new-session -d -c "$PWD" -s codex -x 160 -y 50 "$codex" "${args[@]}"
while tmux -S "$sock" has-session -t codex 2>/dev/null; do sleep 0.5; done
EOF
chmod 700 "$launcher"

pane() { tmux -S "$1" capture-pane -p -t codex 2>/dev/null | grep -v '^[[:space:]]*$' || true; }

# wait_for SOCK REGEX: poll the pane until REGEX shows (0) or WAIT seconds pass (1).
wait_for() {
  local i
  for ((i = 0; i < wait_s * 2; i++)); do
    if pane "$1" | grep -Eq "$2"; then return 0; fi
    if [ -n "$run_pid" ] && ! kill -0 "$run_pid" 2>/dev/null; then return 1; fi
    sleep 0.5
  done
  return 1
}

excerpt() { pane "$1" | sed -n '/write the release notes/,$p' | grep -v '^  /' | sed 's/^/    | /'; }

failed_to_drive=0
probe() {
  local name=$1 mode=ask dir sock db file pane_form="" outcome
  [ "$name" = yolo ] && mode=yolo
  dir="$scratch/$name"
  sock="$dir/tmux.sock"
  db="$dir/evidence.sqlite"
  file="$dir/sandbox/home/alice/release/notes.txt"
  mkdir -p "$dir/sandbox/home/alice/release"
  printf 'version = 1\n[harness.codex]\ntransport = "%s"\ncommand = ["%s", "%s", "%s", "%s"]\n' \
    "$transport" "$launcher" "$sock" "$mode" "$codex" >"$dir/host.toml"
  printf '[{"tool": "files.write", "arguments": {"path": "/home/alice/release/notes.txt", "content": "v1\\n"}}]\n' \
    >"$dir/plan.json"
  echo "== scenario $name (codex $mode mode) =="
  "$sos" run --host-config "$dir/host.toml" --harness codex --principal alice --role maintainer \
    --policy dev-open --sandbox "$dir/sandbox" --evidence "$db" --plan "$dir/plan.json" \
    --timeout $((wait_s * 4)) --workdir "$dir/turn" --no-stream "write the release notes" \
    >"$dir/run.out" 2>"$dir/run.err" &
  run_pid=$!

  local drove=1
  if [ "$mode" = ask ]; then
    # Codex's own per-tool prompt comes first; the person allows this one call.
    if wait_for "$sock" 'Allow the sharedos MCP server to run tool'; then
      echo "  Codex's own tool prompt:"
      excerpt "$sock"
      tmux -S "$sock" send-keys -t codex Enter
    else
      drove=0
    fi
  fi
  if [ $drove = 1 ] && wait_for "$sock" 'SharedOS approval apr-|Scripted model: issued'; then
    if pane "$sock" | grep -q 'SharedOS approval apr-'; then
      pane_form=yes
      echo "  the SharedOS approval form, as the TUI shows it:"
      excerpt "$sock"
      case $name in
        accept) tmux -S "$sock" send-keys -t codex Enter ;;        # 1. True
        false) tmux -S "$sock" send-keys -t codex Down Enter ;;    # 2. False
        esc) tmux -S "$sock" send-keys -t codex Escape ;;          # cancel
        *) tmux -S "$sock" send-keys -t codex Escape ;;
      esac
    fi
    if wait_for "$sock" 'Scripted model: issued'; then
      if [ -n "$pane_form" ]; then echo "  the TUI after the answer:"; else echo "  the TUI (no form was shown):"; fi
      excerpt "$sock"
    else
      drove=0
    fi
  else
    drove=0
  fi
  if [ $drove = 0 ]; then
    echo "  COULD NOT DRIVE: the screen waited for did not come; last pane:"
    pane "$sock" | sed 's/^/    | /'
    failed_to_drive=1
  fi
  # Leave the TUI (Ctrl-C twice), which ends the tmux session, Codex and the turn.
  tmux -S "$sock" send-keys -t codex C-c 2>/dev/null || true
  sleep 1
  tmux -S "$sock" send-keys -t codex C-c 2>/dev/null || true
  local i
  for ((i = 0; i < wait_s * 2; i++)); do kill -0 "$run_pid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$run_pid" 2>/dev/null; then
    tmux -S "$sock" kill-server 2>/dev/null || true
    kill "$run_pid" 2>/dev/null || true
  fi
  wait "$run_pid" 2>/dev/null || true
  run_pid=""

  echo "  evidence (sharedos evidence list):"
  "$sos" evidence list --db "$db" | sed 's/^/    /'
  echo "  why (the attempt's error/detail):"
  "$sos" evidence list --db "$db" --format json | "$root/.venv/bin/python" -c '
import json, sys
for row in json.load(sys.stdin):
    print("    #%s %s %s: %s" % (row["seq"], row["outcome"], row.get("reason") or "-",
          row.get("error") or "-"))'
  echo "  approvals (sharedos approvals list --status all):"
  "$sos" approvals list --db "$db" --status all | sed 's/^/    /'
  for apr in $("$sos" approvals list --db "$db" --status all | grep -o '^apr-[a-z0-9]*'); do
    echo "  sharedos approvals show $apr:"
    "$sos" approvals show "$apr" --db "$db" | sed 's/^/    /'
  done
  outcome=$("$sos" evidence list --db "$db" --format json | "$root/.venv/bin/python" -c '
import json, sys
rows = json.load(sys.stdin)
print(",".join(r["outcome"] + ("/" + r["reason"] if r.get("reason") else "") for r in rows) or "none")')
  echo "RESULT scenario=$name transport=$transport form_shown=${pane_form:-no} evidence=$outcome" \
    "file_written=$([ -f "$file" ] && echo yes || echo no) driven=$([ $drove = 1 ] && echo yes || echo no)"
  echo
}

echo "codex: $("$codex" --version 2>/dev/null)  sharedos: $("$sos" --version 2>/dev/null || echo '?')  $(date -u +%FT%TZ)"
for s in "${scenarios[@]}"; do
  case $s in yolo | accept | false | esc) probe "$s" ;; *) echo "probe: unknown scenario $s" >&2; exit 3 ;; esac
done
[ $failed_to_drive = 0 ] || exit 2
