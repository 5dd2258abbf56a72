#!/usr/bin/env bash
# bench_sweep.sh [BUILD_DIR] — the sweep benchmark (tests/bench_runs.c): 8 policies × 2 budgets on one sample
# from one prefill against a full-cache-only run of that sample (target <= 2x), per sample (the runner's own
# timings) and per whole `kvbench run` process (CPU seconds, wall, peak RSS), alternating pairs, with the
# decode steps each side ran; then batched decode throughput of 15 variants against one sequence.
# BENCH_MODEL / BENCH_TOKENS / BENCH_THREADS / BENCH_PAIRS override the defaults.
set -euo pipefail
build=${1:-build}
model=${BENCH_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
[ -f "$model" ] || { echo "bench_sweep: $model not found (make model)" >&2; exit 1; }
[ -x ./kvbench ] || { echo "bench_sweep: ./kvbench not built (make kvbench)" >&2; exit 1; }
[ -x "$build/tests/bench_runs" ] || make -s BUILD="$build" "$build/tests/bench_runs"
echo "== kvbench sweep (${BENCH_THREADS:-2} threads, $(git rev-parse --short HEAD 2>/dev/null || echo unknown), load average $(cut -d' ' -f1-3 /proc/loadavg))"
OMP_NUM_THREADS=${BENCH_THREADS:-2} "$build/tests/bench_runs" "$model" "${BENCH_TOKENS:-1024}" "${BENCH_PAIRS:-3}" ./kvbench
