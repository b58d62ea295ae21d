#!/usr/bin/env bash
# The crash loop at full length: 50 `kill -9` at random moments during a long task (a lead delegating
# to a coder that alternates slow commands and reads), the daemon restarted and the task resumed after
# each. Checks after every restart that no event a subscriber was sent is lost or changed and that the
# seqs are contiguous; at the end that the task finished, every tool call has exactly one end (the ones
# a crash cut short marked interrupted) and the evidence verifies.
#
# CI runs the same test with 4 kills (tests/e2e_crash_loop.rs). Usage:
#   scripts/crash-loop.sh [KILLS] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export CRASH_LOOP_KILLS="${1:-50}"
export CRASH_LOOP_SEED="${2:-$RANDOM}"
# Long enough to outlast most kills (~0.6 s between kills, a slow command every other step), and under
# the 400 model requests one turn may make.
steps=$((CRASH_LOOP_KILLS * 7)); [ "$steps" -gt 390 ] && steps=390
export CRASH_LOOP_STEPS="${CRASH_LOOP_STEPS:-$steps}"
echo "crash loop: $CRASH_LOOP_KILLS kills, seed $CRASH_LOOP_SEED (rerun with: $0 $CRASH_LOOP_KILLS $CRASH_LOOP_SEED)"
cargo test --release --locked --test e2e_crash_loop -- --nocapture
