#!/usr/bin/env bash
# run_bench.sh BUILD_DIR — `make bench`: kvbench's CPU backend against llama.cpp on the same GGUF and threads,
# measured so that a shared, busy machine does not decide the ratios:
#   - the two engines run alternately as separate processes, kvbench then llama.cpp, BENCH_PAIRS pairs (>= 3),
#     each process measuring itself the same way (tests/bench_util.h): prefill of 512 / 2048 / 8192 random
#     tokens, single-sequence decode, peak RSS; ratios are computed per pair and their median printed;
#   - tokens per CPU-second of each process (getrusage: what the process itself burnt, which holds steady when
#     other jobs take the cores) next to tokens per wall-second, and the load average before every process;
#   - llama.cpp at its own defaults (flash attention `auto`, f16 cache, extra weight buffers on), through
#     tests/peer_llama.c on llama.cpp's C API, and llama.cpp's own llama-bench — both built from the sources
#     vendored in PyPI's llama-cpp-python sdist (scripts/build_llama_cpp.sh, cached under BUILD_DIR/llama.cpp);
#   - the policies' share of an 8192-token prefill, all timed within tests/bench_policies.c;
#   - a sweep (8 policies x 2 budgets from one prefill) against one full-cache run, per sample and per whole
#     process, with the decode steps each side ran (tests/bench_sweep.sh); and its decode step alone: 16
#     variants of one prefill (views of it, as the sweep decodes them) against the full cache alone.
# If llama.cpp cannot be built or run, kvbench's absolute numbers are printed and the reason said.
# Environment: BENCH_THREADS (default 2; a list such as "1 2" runs the pairs at each), BENCH_PAIRS (3),
# BENCH_POLICY_ROUNDS (3; 0 skips the policies' bench), BENCH_F16 (1: each pair also runs kvbench with its opt-in f16 cache, KVBENCH_CACHE=f16,
# for its prefill and peak RSS; 0 skips it), BENCH_BACKEND (kvbench's backend, default cpu), BENCH_MAX_PREFILL (8192: the
# prefills of 512 / 2048 / 8192 tokens up to it), BENCH_QUICK=1 (512-token prefill and short decodes only, no
# policies or sweep), BENCH_MODEL, BENCH_LLAMA_EXTRA_BUFTS=0 (llama.cpp without its extra buffers);
# KVBENCH_CACHE=f16 / KVBENCH_DECODE=fast reach kvbench's benches as they reach a run (opt-in paths, printed).
# OMP_WAIT_POLICY is passed to both engines alike (both use OpenMP) and printed.
set -euo pipefail
build=${1:-build}
model=${BENCH_MODEL:-models/SmolLM2-135M-Instruct.Q4_1.gguf}
thread_list=${BENCH_THREADS:-2}
pairs=${BENCH_PAIRS:-3}
quick=${BENCH_QUICK:+--quick}
max_prefill=${BENCH_MAX_PREFILL:-$([ -n "$quick" ] && echo 512 || echo 8192)}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -f "$model" ] || { echo "run_bench: $model not found (make model)" >&2; exit 1; }
[ "$pairs" -ge 1 ] 2>/dev/null || { echo "run_bench: BENCH_PAIRS must be a positive number, got '$pairs'" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "== make bench: kvbench $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'),"\
     "$(nproc) cores ($(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)), load average $(load)"
echo "   OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset (libgomp default)}, model $model,"\
     "kvbench cache ${KVBENCH_CACHE:-f32}, decode ${KVBENCH_DECODE:-exact}"

# --- llama.cpp: built once from the PyPI sdist's vendored sources; any failure leaves kvbench's numbers alone ---
llama_ok=0 llama_why=""
echo "   llama.cpp: scripts/build_llama_cpp.sh (cached; the first build takes minutes)"
if llama_dir=$(bash scripts/build_llama_cpp.sh "$build" lib 2>"$out/llama_build.err" | tail -n 1) && [ -n "$llama_dir" ]; then
    llama_dir=$(cd "$llama_dir" && pwd)
    export LD_LIBRARY_PATH=$llama_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    if cc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -I"$llama_dir/include" -o "$build/tests/peer_llama" \
        tests/peer_llama.c -L"$llama_dir/lib" -lllama -lggml -lggml-base -Wl,-rpath,"$llama_dir/lib" \
        2>"$out/peer_cc.err"; then
        llama_ok=1
        echo "   llama.cpp $(cat "$llama_dir/COMMIT") (llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION:-0.3.36}'s vendored sources, $llama_dir)"
    else
        llama_why="tests/peer_llama.c did not compile against $llama_dir: $(head -n 3 "$out/peer_cc.err" | tr '\n' ' ')"
    fi
else
    llama_why="llama.cpp could not be built: $(tail -n 2 "$out/llama_build.err" | tr '\n' ' ')"
fi
[ "$llama_ok" = 1 ] || echo "   $llama_why — kvbench's absolute numbers only"

# Runs the peer once; if llama.cpp's extra weight buffers (AMX / repacked Q4_1) crash it, says so and reruns
# it without them (BENCH_LLAMA_EXTRA_BUFTS=0), for this and every later pair.
run_llama() { # threads output_file
    local rc=0
    "$build/tests/peer_llama" "$model" "$1" $quick --max-prefill "$max_prefill" >"$2" 2>"$2.err" || rc=$?
    if [ "$rc" -ne 0 ] && [ "${BENCH_LLAMA_EXTRA_BUFTS:-1}" != 0 ]; then
        local why="exit $rc"
        [ "$rc" -gt 128 ] && why="killed by signal $((rc - 128))$([ "$rc" = 139 ] && echo ", a segmentation fault")"
        echo "   llama.cpp with its default extra weight buffers failed ($why; its last log line: $(grep '^# llama.cpp' "$2" | tail -n 1 | cut -c 14-))"
        echo "   -> from now on without them (BENCH_LLAMA_EXTRA_BUFTS=0), as if --repack 0 / use_extra_bufts=0"
        export BENCH_LLAMA_EXTRA_BUFTS=0
        rc=0
        "$build/tests/peer_llama" "$model" "$1" $quick --max-prefill "$max_prefill" >"$2" 2>"$2.err" || rc=$?
    fi
    [ "$rc" -eq 0 ] || { echo "   llama.cpp failed (exit $rc): $(tail -n 2 "$2.err" | tr '\n' ' ')"; return 1; }
}

# Median of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# field KEY COLUMN FILE: column COLUMN (2 = per wall-second, 3 = per CPU-second) of line KEY.
field() { awk -v k="$1" -v c="$2" '$1 == k { print $c }' "$3"; }
# per_pair KEY COLUMN SIDE: that field in each pair's output of SIDE (kv: kvbench, kvh: kvbench with the f16
# cache, ll: llama.cpp) at the current thread count, one line per pair.
per_pair() { for i in $(seq 1 "$pairs"); do field "$1" "$2" "$out/$3.$threads.$i"; done; }
# ratios KEY COLUMN SIDE_A SIDE_B: SIDE_A / SIDE_B of that field, one line per pair.
ratios() { paste -d' ' <(per_pair "$1" "$2" "$3") <(per_pair "$1" "$2" "$4") | awk '{ print $1 / $2 }'; }
# ratios_of KEY_A KEY_B COLUMN: kvbench's KEY_A / llama.cpp's KEY_B, one line per pair.
ratios_of() { paste -d' ' <(per_pair "$1" "$3" kv) <(per_pair "$2" "$3" ll) | awk '{ print $1 / $2 }'; }

for threads in $thread_list; do
    echo
    echo "== interleaved pairs, $threads threads: kvbench (tests/bench_engine.c) then llama.cpp (tests/peer_llama.c), $pairs pairs"
    for i in $(seq 1 "$pairs"); do
        echo "-- pair $i: kvbench (load average $(load))"
        OMP_NUM_THREADS=$threads "$build/tests/bench_engine" "$model" --backend "${BENCH_BACKEND:-cpu}" $quick --max-prefill "$max_prefill" >"$out/kv.$threads.$i"
        grep -v '^cache_' "$out/kv.$threads.$i" | sed 's/^/   /'
        if [ "${BENCH_F16:-1}" = 1 ]; then
            echo "-- pair $i: kvbench, KVBENCH_CACHE=f16 (load average $(load))"
            KVBENCH_CACHE=f16 OMP_NUM_THREADS=$threads "$build/tests/bench_engine" "$model" --backend "${BENCH_BACKEND:-cpu}" $quick --max-prefill "$max_prefill" >"$out/kvh.$threads.$i" 2>/dev/null
            grep -E '^(#|prefill_|peak_rss|decode_.*step)' "$out/kvh.$threads.$i" | sed 's/^/   /'
        fi
        if [ "$llama_ok" = 1 ]; then
            echo "-- pair $i: llama.cpp (load average $(load))"
            if run_llama "$threads" "$out/ll.$threads.$i"; then
                sed 's/^/   /' "$out/ll.$threads.$i"
            else
                llama_ok=0
                llama_why="llama.cpp failed in pair $i"
            fi
        fi
    done
    echo
    echo "== summary, $threads threads: medians over $pairs pairs (tokens per wall-second | per CPU-second)"
    keys="$(for n in 512 2048 8192; do if [ "$n" -le "$max_prefill" ]; then echo "prefill_$n"; fi; done) decode_1 decode_16"
    for key in $keys; do
        kv_wall=$(per_pair "$key" 2 kv | median)
        kv_cpu=$(per_pair "$key" 3 kv | median)
        line=$(printf "%-13s kvbench %8.1f | %8.1f" "$key" "$kv_wall" "$kv_cpu")
        if [ "$llama_ok" = 1 ] && [ -n "$(field "$key" 2 "$out/ll.$threads.1")" ]; then
            ll_wall=$(per_pair "$key" 2 ll | median)
            ll_cpu=$(per_pair "$key" 3 ll | median)
            r_wall=$(ratios "$key" 2 kv ll | median)
            r_cpu=$(ratios "$key" 3 kv ll | median)
            r_all=$(ratios "$key" 3 kv ll | awk '{ printf "%.2f ", $1 }')
            line+=$(printf "   llama.cpp %8.1f | %8.1f   ratio %.2fx | %.2fx per CPU-s (pairs: %s)" "$ll_wall" "$ll_cpu" "$r_wall" "$r_cpu" "$r_all")
        elif [ "$key" = decode_16 ]; then
            line+="   (16 sequences decoding together)"
        fi
        echo "$line"
    done
    # kvbench alone: the opt-in FAST decode (KVBENCH_DECODE=fast) in the same processes, and the cost of a
    # 16-sequence step against a 1-sequence one (per wall-second | per CPU-second)
    for key in decode_1_fast decode_16_fast; do
        [ -n "$(field "$key" 2 "$out/kv.$threads.1")" ] || continue
        line=$(printf "%-13s kvbench %8.1f | %8.1f   (KVBENCH_DECODE=fast, same processes)" "$key" \
            "$(per_pair "$key" 2 kv | median)" \
            "$(per_pair "$key" 3 kv | median)")
        peer=${key%_fast}
        if [ "$llama_ok" = 1 ] && [ -n "$(field "$peer" 2 "$out/ll.$threads.1")" ]; then
            line+=$(printf "   against llama.cpp's %s: %.2fx | %.2fx per CPU-s (pairs: %s)" "$peer" \
                "$(ratios_of "$key" "$peer" 2 | median)" "$(ratios_of "$key" "$peer" 3 | median)" \
                "$(ratios_of "$key" "$peer" 3 | awk '{ printf "%.2f ", $1 }')")
        fi
        echo "$line"
    done
    # ... and the sweep's shape: 16 variants (views of one 1024-token prefill) against the full cache alone;
    # with the f16 cache too (its processes)
    for side in kv kvh; do
        [ -f "$out/$side.$threads.1" ] || continue
        for key in decode_16_step_vs_1 decode_16_fast_step_vs_1 decode_16_fast_step_vs_exact_1 \
            decode_variants_16_step_vs_full_1 decode_variants_16_fast_step_vs_full_1; do
            [ -n "$(field "$key" 2 "$out/$side.$threads.1")" ] || continue
            printf "%-39s %5.2fx | %5.2fx (pairs per CPU-s: %s)%s\n" "$key" \
                "$(per_pair "$key" 2 "$side" | median)" \
                "$(per_pair "$key" 3 "$side" | median)" \
                "$(per_pair "$key" 3 "$side" | tr '\n' ' ')" \
                "$([ "$side" = kvh ] && echo "  KVBENCH_CACHE=f16")"
        done
    done
    if [ "${BENCH_F16:-1}" = 1 ]; then
        for key in $(for n in 512 2048 8192; do if [ "$n" -le "$max_prefill" ]; then echo "prefill_$n"; fi; done); do
            line=$(printf "%-13s f16 cache %6.1f | %6.1f" "$key" \
                "$(per_pair "$key" 2 kvh | median)" \
                "$(per_pair "$key" 3 kvh | median)")
            if [ "$llama_ok" = 1 ]; then
                line+=$(printf "   ratio to llama.cpp %.2fx per CPU-s (pairs: %s)" \
                    "$(ratios "$key" 3 kvh ll | median)" \
                    "$(ratios "$key" 3 kvh ll | awk '{ printf "%.2f ", $1 }')")
            fi
            echo "$line"
        done
        kvh_rss=$(per_pair peak_rss_mib 2 kvh | median)
        line=$(printf "%-13s f16 cache %6.0f MiB" peak_rss "$kvh_rss")
        if [ "$llama_ok" = 1 ]; then
            line+=$(awk -v a="$kvh_rss" -v b="$(per_pair peak_rss_mib 2 ll | median)" \
                'BEGIN { printf "   ratio to llama.cpp %.2fx", a / b }')
        fi
        echo "$line (KVBENCH_CACHE=f16, after the longest prefill; whole process)"
    fi
    kv_rss=$(per_pair peak_rss_mib 2 kv | median)
    line=$(printf "%-13s kvbench %6.0f MiB" peak_rss "$kv_rss")
    if [ "$llama_ok" = 1 ]; then
        ll_rss=$(per_pair peak_rss_mib 2 ll | median)
        line+=$(awk -v a="$kv_rss" -v b="$ll_rss" 'BEGIN { printf "   llama.cpp %6.0f MiB   ratio %.2fx", b, a / b }')
    fi
    echo "$line (after the longest prefill; whole process)"
done
[ "$llama_ok" = 1 ] || echo "   llama.cpp: none — $llama_why"
awk '$1 == "cache_context" { L = $2 } $1 == "cache_full_bytes" { f = $2 } $1 == "cache_20pct_bytes" { p = $2 }
     END { if (f > 0) printf "KV cache at %d tokens (kvbench, f32): full %.1f MiB, 20%% budget %.1f MiB (%.1f%%)\n", L, f / 1048576, p / 1048576, 100 * p / f }' \
    "$out/kv.${thread_list%% *}.1"

# llama-bench needs llama.cpp's `common` library as well: built now (cached), after the pairs.
[ "$llama_ok" = 1 ] && [ ! -x "$llama_dir/bin/llama-bench" ] &&
    echo && echo "== building llama.cpp's llama-bench (scripts/build_llama_cpp.sh all: minutes, once)"
if [ "$llama_ok" = 1 ] && ! bash scripts/build_llama_cpp.sh "$build" all >/dev/null 2>"$out/lb_build.err"; then
    echo
    echo "== llama.cpp's llama-bench: not built ($(tail -n 1 "$out/lb_build.err"))"
elif [ "$llama_ok" = 1 ]; then
    llama_bench_args=(-m "$model" -p 512,2048 -n 64 -r 3)
    [ -n "$quick" ] && llama_bench_args=(-m "$model" -p 512 -n 16 -r 3)
    for threads in $thread_list; do
        echo
        echo "== llama.cpp's own llama-bench, its defaults, $threads threads (load average $(load))"
        "$llama_dir/bin/llama-bench" "${llama_bench_args[@]}" -t "$threads" \
            $([ "${BENCH_LLAMA_EXTRA_BUFTS:-1}" = 0 ] && echo "--repack 0") 2>"$out/lb.err" ||
            echo "   llama-bench failed: $(tail -n 2 "$out/lb.err" | tr '\n' ' ')"
    done
fi

[ -n "$quick" ] && exit 0
threads=${thread_list##* }
if [ "${BENCH_POLICY_ROUNDS:-3}" != 0 ]; then
    echo
    echo "== eviction policies at L=8192, all timed in one program (tests/bench_policies.c, $threads threads, load average $(load))"
    OMP_NUM_THREADS=$threads "$build/tests/bench_policies" "$model" "${BENCH_POLICY_ROUNDS:-3}"
fi

echo
echo "== sweep: 8 policies x 2 budgets from one prefill vs one full-cache run (tests/bench_sweep.sh, load average $(load))"
BENCH_THREADS=$threads bash tests/bench_sweep.sh "$build"
echo
echo "== done, load average $(load)"
