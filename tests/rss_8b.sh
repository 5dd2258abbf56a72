#!/usr/bin/env bash
# rss_8b.sh [BUILD_DIR] — peak resident memory of the CPU backend on Llama-3.1-8B in Q4_K_M with an 8k-token
# cache, measured on GGUFs of its shape at two layer counts and extrapolated per layer to its 32:
#   - scripts/gen_llama8b_shape.py writes the GGUFs (random codes, the Q4_K / Q6_K mix of llama.cpp's Q4_K_M at
#     its heavier end; RSS_LAYERS, default "2 4") into RSS_DIR (default a temporary directory, removed after);
#   - tests/bench_rss.c opens each as a run does (the backend keeps every matrix's blocks) and runs a prefill of
#     RSS_CONTEXT tokens (8192) and RSS_STEPS decode steps (2) with an f32 cache, printing its resident set after
#     open, after the run, and its peak (ru_maxrss, load included);
#   - the peak is fitted as a + b * layers through the two points (every layer adds the same weights and cache),
#     and a + 32 b printed: the 8B model's peak. Needs python3 with numpy + gguf (RSS_PYTHON, default
#     /work/venv-ref/bin/python when it exists, else python3) and about 2.5 GB of disk.
set -euo pipefail
build=${1:-build}
python=${RSS_PYTHON:-$([ -x /work/venv-ref/bin/python ] && echo /work/venv-ref/bin/python || echo python3)}
layers=(${RSS_LAYERS:-2 4})
context=${RSS_CONTEXT:-8192}
steps=${RSS_STEPS:-2}
[ ${#layers[@]} -eq 2 ] && [ "${layers[0]}" -lt "${layers[1]}" ] || { echo "rss_8b: RSS_LAYERS needs two counts, ascending" >&2; exit 2; }
dir=${RSS_DIR:-}
if [ -z "$dir" ]; then
    dir=$(mktemp -d "${TMPDIR:-/tmp}/kvbench_rss.XXXXXX")
    trap 'rm -rf "$dir"' EXIT
fi
make -s --no-print-directory CUDA=0 BUILD="$build" "$build/tests/bench_rss"
echo "== rss_8b: kvbench $(git rev-parse --short HEAD 2>/dev/null || echo unknown), $(date -u '+%Y-%m-%d %H:%M UTC'),"\
     "$(nproc) cores, OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}, context $context, $steps decode steps, f32 cache"
peaks=()
for n in "${layers[@]}"; do
    model="$dir/llama8b_shape_${n}l.gguf"
    [ -f "$model" ] || "$python" scripts/gen_llama8b_shape.py "$model" "$n"
    echo "-- $n layers: $(du -m "$model" | cut -f1) MiB file"
    "$build/tests/bench_rss" "$model" "$context" "$steps" | tee "$dir/out_$n"
    peaks+=("$(sed -n 's/^peak_rss_mib //p' "$dir/out_$n")")
done
awk -v l0="${layers[0]}" -v l1="${layers[1]}" -v p0="${peaks[0]}" -v p1="${peaks[1]}" -v ctx="$context" 'BEGIN {
    b = (p1 - p0) / (l1 - l0); a = p0 - b * l0;
    printf "fit: peak_rss_mib = %.1f + %.1f * layers\n", a, b;
    printf "llama-3.1-8b Q4_K_M (32 layers), %s-token f32 cache: peak_rss_mib %.0f (%.2f GiB)\n", ctx, a + 32 * b, (a + 32 * b) / 1024 }'
