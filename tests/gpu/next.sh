#!/usr/bin/env bash
# next.sh — everything the next lent GPU machine should run, as one command (issue 37), within 8 minutes:
#   1. tests/gpu/check.sh: the kernel lab, CUDA against CPU, bad input and the speed figures (random weights);
#   2. tests/gpu/trained.sh: SmolLM2-135M's trained GGUF, carried beforehand in parts (tests/gpu/model_parts.sh),
#      cpu against cuda on 10 real samples: answers and keep-sets;
#   3. tests/gpu/kvpress_side.py: kvpress 0.5.5 beside kvbench on a random Llama-3.1-8B-shaped checkpoint (4
#      layers): keep-set overlap per (layer, kv-head) and the time per sample, when the wheels of
#      tests/gpu/wheels.sh were carried in .whl/.
# Each stage runs whatever the one before gave. Its outputs are packed into $OUT/logs.tar.gz (the device runner
# brings back at most 8 files) beside the three summaries; the last line says which stages failed.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
final_out=${OUT:-}
stage_out=$(mktemp -d)
export OUT=$stage_out
failed=()
start=$SECONDS
timeout 330 bash tests/gpu/check.sh || failed+=("check.sh")
echo "### next.sh: check.sh done at t=$((SECONDS - start)) s"
timeout 240 bash tests/gpu/trained.sh || failed+=("trained.sh")
echo "### next.sh: trained.sh done at t=$((SECONDS - start)) s"
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl &&
        PYTHONPATH=/tmp/site timeout 150 python3 tests/gpu/kvpress_side.py --device cuda --backend cuda --layers 4 \
            --out "$BUILD/gpu/kvpress" 2>&1 | tee "$stage_out/kvpress_side.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] && cp "$BUILD/gpu/kvpress/kvpress_side.txt" "$BUILD/gpu/kvpress/kvpress_side.json" \
        "$stage_out/" || failed+=("kvpress_side.py")
else
    echo "SKIP  kvpress_side.py: no .whl/ (bash tests/gpu/wheels.sh here, then carry .whl)"
    failed+=("kvpress_side.py (no wheels)")
fi
echo "### next.sh: done at t=$((SECONDS - start)) s"
if [ -n "$final_out" ] && [ -d "$final_out" ]; then
    for f in summary.txt trained_summary.txt kvpress_side.txt; do [ -f "$stage_out/$f" ] && cp "$stage_out/$f" "$final_out/"; done
    tar -C "$stage_out" -czf "$final_out/logs.tar.gz" .
fi
if [ ${#failed[@]} -eq 0 ]; then echo "NEXT: PASS"; else printf -v list '%s; ' "${failed[@]}"; echo "NEXT: FAIL: ${list%; }"; exit 1; fi
