#!/usr/bin/env bash
# The HTTP API against schemathesis, the third-party conformance suite: a live daemon in a temporary
# home, offline (its provider points at a port where nothing listens, so a submitted task fails at
# its first request and nothing leaves this machine), its OpenAPI document fed to schemathesis
# twice — with the token (every check, every phase, bounded) and without it (every route must
# answer 401 as the document says).
#
# What the API deliberately does that schemathesis would otherwise count against it is in
# scripts/schemathesis.toml, each explained in docs/interface.md ("Conformance").
#
# Usage: scripts/schemathesis.sh [AGENTD_BINARY]
#   AGENTD_BINARY defaults to $CARGO_TARGET_DIR/debug/agentd (built by `cargo build` / `cargo test`).
# Environment: SCHEMATHESIS_VENV (default ~/.cache/agentd-schemathesis), the virtual environment this
#   script owns, with schemathesis==$SCHEMATHESIS_VERSION installed into it when missing;
#   SCHEMATHESIS_MAX_EXAMPLES (default 50); SCHEMATHESIS_TIME_LIMIT (seconds for the run with the token,
#   default 420); SCHEMATHESIS_NO_TOKEN_TIME_LIMIT (seconds for the run without, default 120: every
#   answer there is the same 401, so thousands of cases say what more would).
# Exit codes: 0 both runs clean; 1 schemathesis reported failures (or the daemon died); 3 schemathesis
#   could not be installed here (no Python venv, no package index): NOT passed, said so.
set -uo pipefail
cd "$(dirname "$0")/.."

SCHEMATHESIS_VERSION=4.32.5
VENV=${SCHEMATHESIS_VENV:-${HOME:-/root}/.cache/agentd-schemathesis}
MAX_EXAMPLES=${SCHEMATHESIS_MAX_EXAMPLES:-50}
TIME_LIMIT=${SCHEMATHESIS_TIME_LIMIT:-420}
NO_TOKEN_TIME_LIMIT=${SCHEMATHESIS_NO_TOKEN_TIME_LIMIT:-120}
TARGET=${CARGO_TARGET_DIR:-target}
BIN=${1:-$TARGET/debug/agentd}

say() { echo "== $*"; }

if [ ! -x "$BIN" ]; then
  echo "schemathesis: no agentd binary at $BIN (run cargo build first)"; exit 1
fi
if ! "$VENV/bin/schemathesis" --version 2>/dev/null | grep -q "$SCHEMATHESIS_VERSION"; then
  say "installing schemathesis==$SCHEMATHESIS_VERSION into $VENV"
  { python3 -m venv "$VENV" && "$VENV/bin/pip" install --quiet "schemathesis==$SCHEMATHESIS_VERSION"; } \
    >/tmp/agentd-schemathesis-install.log 2>&1 || {
      echo "schemathesis could not be installed (log: /tmp/agentd-schemathesis-install.log):"
      tail -5 /tmp/agentd-schemathesis-install.log
      exit 3
    }
fi
ST=("$VENV/bin/schemathesis" --config-file "$PWD/scripts/schemathesis.toml")

WORK=$(mktemp -d -t agentd-schemathesis.XXXXXX)
HOME_DIR="$WORK/home"
DAEMON=''
cleanup() {
  if [ -n "$DAEMON" ] && kill -0 "$DAEMON" 2>/dev/null; then
    kill -TERM "$DAEMON" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$DAEMON" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$DAEMON" 2>/dev/null
    wait "$DAEMON" 2>/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# A port where nothing listens: bound and released, so the provider's requests are refused at once.
NOWHERE=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$BIN" --home "$HOME_DIR" init >/dev/null || exit 1
sed -i "s|^base_url = \"http://127.0.0.1:8000/v1\"|base_url = \"http://127.0.0.1:$NOWHERE/v1\"|" "$HOME_DIR/agentd.toml"
mkdir -p "$WORK/workspace"

"$BIN" --home "$HOME_DIR" serve --http 127.0.0.1:0 >"$WORK/serve.log" 2>&1 &
DAEMON=$!
URL=''
for _ in $(seq 300); do
  URL=$("$BIN" --home "$HOME_DIR" dashboard 2>/dev/null) && break
  kill -0 "$DAEMON" 2>/dev/null || { echo "the daemon exited at start:"; cat "$WORK/serve.log"; exit 1; }
  sleep 0.1
done
[ -n "$URL" ] || { echo "the daemon did not serve HTTP within 30 s:"; cat "$WORK/serve.log"; exit 1; }
BASE=${URL%%/?token=*}
TOKEN=$(cat "$HOME_DIR/http.token")
SPEC="$BASE/api/v1/openapi.json"
say "agentd $("$BIN" --version | sed 's/.* //') at $BASE; schemathesis $SCHEMATHESIS_VERSION"

# One task that exists and has ended, so the routes under /tasks/{task_id} have one to find.
TASK=$(curl -sf -H "Authorization: Bearer $TOKEN" -H 'content-type: application/json' \
  -d "{\"objective\": \"Say hello\", \"workspace\": \"$WORK/workspace\"}" "$BASE/api/v1/tasks" \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["task_id"])') || { echo "cannot submit a task"; exit 1; }

common=(--url "$BASE" --checks all --max-examples "$MAX_EXAMPLES" --request-timeout 5 --no-color
  --generation-database none --suppress-health-check all)
status=0
# schemathesis keeps a cache in its working directory: the temporary one, not the checkout.
cd "$WORK" || exit 1

say "with the token: every check; phases examples, coverage, fuzzing, stateful (at most ${TIME_LIMIT}s)"
timeout "$((TIME_LIMIT + 120))" "${ST[@]}" run "$SPEC" "${common[@]}" --max-time "$TIME_LIMIT" -H "Authorization: Bearer $TOKEN" \
  --phases examples,coverage,fuzzing,stateful || status=1

say "without the token: every route must answer 401 (at most ${NO_TOKEN_TIME_LIMIT}s)"
timeout "$((NO_TOKEN_TIME_LIMIT + 120))" "${ST[@]}" run "$SPEC" "${common[@]}" --max-time "$NO_TOKEN_TIME_LIMIT" \
  --phases examples,coverage,fuzzing || status=1

kill -0 "$DAEMON" 2>/dev/null || { echo "the daemon died during the run:"; tail -40 "$WORK/serve.log"; status=1; }
# What clients sent must not make the daemon log errors or panic (a task failing on the model that is
# not there is the daemon's warning, not an error).
if grep -qE 'ERROR|panicked' "$WORK/serve.log"; then
  echo "the daemon logged errors during the run:"; grep -E 'ERROR|panicked' "$WORK/serve.log" | head -20; status=1
fi
echo "(a task to find: $TASK)"
exit "$status"
