#!/usr/bin/env bash
# The fleet chaos run at full size: 5 daemons on a 3-server NATS cluster (replicas = 3), 100 tasks,
# 10 `kill -9` of daemons (each started again under its own name) and 2 restarts of NATS servers at
# moments drawn from a seed. Checks that every task finished exactly once, every task's seqs are
# contiguous, every tool call has one end, every watcher (following from any live daemon) got every
# event in order, and no task ran on two nodes at once (tests/e2e_fleet_chaos.rs says how).
#
# CI runs the same test small (3 daemons, 20 tasks, 3 kills, 1 NATS restart). It needs nats-server
# 2.10 or later: AGENTD_NATS_SERVER, or PATH (`.ci/run` installs it into ~/.cache/agentd-nats).
# Usage:
#   scripts/fleet-chaos.sh [DAEMONS] [TASKS] [KILLS] [NATS_RESTARTS] [SEED] [STEPS]
# STEPS: the coder's steps a task (default 24 here, 8 in CI), so that the tasks outlast the chaos.
set -euo pipefail
cd "$(dirname "$0")/.."
export CHAOS_DAEMONS="${1:-5}" CHAOS_TASKS="${2:-100}" CHAOS_KILLS="${3:-10}"
export CHAOS_NATS_RESTARTS="${4:-2}" CHAOS_SEED="${5:-$RANDOM}" CHAOS_STEPS="${6:-24}"
if [ -z "${AGENTD_NATS_SERVER:-}" ] && [ -x "${HOME:-/root}/.cache/agentd-nats/bin/nats-server" ]; then
  export AGENTD_NATS_SERVER="${HOME:-/root}/.cache/agentd-nats/bin/nats-server"
fi
export AGENTD_REQUIRE_NATS=1
echo "fleet chaos: $CHAOS_DAEMONS daemons, $CHAOS_TASKS tasks, $CHAOS_KILLS kills, $CHAOS_NATS_RESTARTS NATS restarts, seed $CHAOS_SEED"
echo "(rerun with: $0 $CHAOS_DAEMONS $CHAOS_TASKS $CHAOS_KILLS $CHAOS_NATS_RESTARTS $CHAOS_SEED $CHAOS_STEPS)"
cargo test --locked --test e2e_fleet_chaos -- --nocapture
