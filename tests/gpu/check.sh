#!/usr/bin/env bash
# check.sh — the GPU check of the CUDA backend, on a machine with an NVIDIA GPU (Hopper or newer):
#     bash tests/gpu/check.sh [--quick]        (--quick skips the 32k-token timings)
# Stages, each ending in PASS, FAIL or SKIP, the next one running whatever the last one gave:
#   1. device: what nvidia-smi sees;
#   1b. libraries: build-gpu-deps/deps.tar.xz (tests/gpu/deps.sh) unpacked into a private prefix when present;
#   2. build: make CUDA=1 kvbench into $BUILD (default build/), then tests/gpu/check_cuda.c against its library;
#   3. check_cuda: kernel lab, CUDA against CPU on synthetic models, bad input, speed against ceilings measured
#      in the same run (at most CHECK_TIMEOUT seconds, default 330);
#   4. end to end: kvbench generate on the cpu and cuda backends with the small Hugging Face models shipped
#      under tests/data/hf_fixtures (and the SmolLM2 GGUF when models/ has it; it is not in the repository).
# Ends with one SUMMARY line and exits non-zero if anything failed. 27 to 35 s on an H200 (2026-12-04).
# Logs go to $BUILD/gpu/; when $OUT is set (a device runner's output folder) they are copied there too.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LOGS=$BUILD/gpu
CHECK_TIMEOUT=${CHECK_TIMEOUT:-330}
mkdir -p "$LOGS"
failed=()
start=$SECONDS
step() { printf '\n### %s  (t=%ds)\n' "$*" $((SECONDS - start)); }

finish() {
    local verdict
    if [ ${#failed[@]} -eq 0 ]; then
        verdict="SUMMARY: PASS (all GPU checks; speed targets are listed above as pass/MISS)"
    else
        local list
        printf -v list '%s; ' "${failed[@]}"
        verdict="SUMMARY: FAIL: ${list%; }"
    fi
    printf '\n%s  (%ds)\n' "$verdict" $((SECONDS - start))
    echo "$verdict" >"$LOGS/summary.txt"
    if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
        # At most 8 files: the runner brings back a bounded set.
        for f in summary.txt build.log check.log e2e.log nvidia-smi.txt; do
            [ -f "$LOGS/$f" ] && cp "$LOGS/$f" "$OUT/"
        done
    fi
    [ ${#failed[@]} -eq 0 ]
    exit $?
}

step "device"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.max.sm --format=csv 2>&1 |
        tee "$LOGS/nvidia-smi.txt"
else
    echo "nvidia-smi not found (check_cuda reports what the CUDA runtime sees)" | tee "$LOGS/nvidia-smi.txt"
fi

step "libraries"
# A GPU machine without network cannot apt-get kvbench's libraries: tests/gpu/deps.sh packs them here into
# build-gpu-deps/deps.tar.xz (carry that folder), unpacked into a private prefix put on the compiler's and
# loader's paths. Without it, the system's own libraries must do.
deps=build-gpu-deps/deps.tar.xz
if [ -f "$deps" ]; then
    prefix=$PWD/$BUILD/gpu-deps
    rm -rf "$prefix" && mkdir -p "$prefix" && tar -C "$prefix" -xJf "$deps" || {
        echo "FAIL  libraries: cannot unpack $deps"
        failed+=("libraries")
        finish
    }
    export CPATH=$prefix/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$prefix/lib${LIBRARY_PATH:+:$LIBRARY_PATH}
    export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    command -v make >/dev/null || export PATH=$PATH:$prefix/bin
    echo "PASS  libraries: $deps unpacked into $prefix (cJSON, OpenBLAS, SQLite, libzip, zlib headers and libraries)"
else
    echo "SKIP  libraries: no $deps (bash tests/gpu/deps.sh makes it); using the system's"
fi

step "build: make BUILD=$BUILD CUDA=1 kvbench"
# The Makefile also looks in /usr/local/cuda/bin; make sure `nvcc` resolves for it either way.
command -v nvcc >/dev/null || export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
if ! command -v nvcc >/dev/null; then
    echo "FAIL  build: nvcc not found (PATH, CUDA_HOME or /usr/local/cuda/bin); the CUDA backend needs the toolkit"
    failed+=("build (no nvcc)")
    finish
fi
jobs=$(nproc 2>/dev/null || echo 4)
make --no-print-directory BUILD="$BUILD" CUDA=1 info
if make -j"$jobs" --no-print-directory BUILD="$BUILD" CUDA=1 kvbench >"$LOGS/build.log" 2>&1; then
    echo "PASS  build (log: $LOGS/build.log)"
else
    tail -n 30 "$LOGS/build.log"
    echo "FAIL  build (log: $LOGS/build.log)"
    failed+=("build")
    finish
fi
# The link flags come from the Makefile, so the two never disagree.
ldlibs=$(make -s --no-print-directory BUILD="$BUILD" CUDA=1 --eval='print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
if gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -fopenmp -DKVBENCH_CUDA -o "$LOGS/check_cuda" \
        tests/gpu/check_cuda.c "$BUILD/libkvbench.a" $ldlibs >>"$LOGS/build.log" 2>&1; then
    echo "PASS  build of tests/gpu/check_cuda.c"
else
    tail -n 30 "$LOGS/build.log"
    echo "FAIL  build of tests/gpu/check_cuda.c (log: $LOGS/build.log)"
    failed+=("check program build")
    finish
fi

step "check_cuda: kernel lab, CUDA against CPU, bad input, speed (at most ${CHECK_TIMEOUT}s)"
timeout --kill-after=10 "$CHECK_TIMEOUT" "$LOGS/check_cuda" "$@" 2>&1 | tee "$LOGS/check.log"
rc=${PIPESTATUS[0]}
case $rc in
    0) ;;
    2)  # check_cuda's "no usable GPU": its one line above says what was needed and what was found.
        failed+=("no usable GPU")
        step "end to end"
        echo "SKIP  end to end: no usable GPU (see the line above)"
        finish ;;
    124 | 137) # A kernel that never returns would hang every cuda run after it too: stop here.
        echo "FAIL  check_cuda ran past ${CHECK_TIMEOUT}s (the lines above are what it finished)"
        failed+=("check_cuda (timeout)")
        step "end to end"
        echo "SKIP  end to end: check_cuda timed out (a hanging kernel would hang these too)"
        finish ;;
    *) failed+=("check_cuda (exit $rc)") ;;
esac

step "end to end: kvbench generate, cpu then cuda"
: >"$LOGS/e2e.log"
# name|model|prompt|extra flags: the shipped fixtures (head dim 16: the Llama one with llama3 RoPE scaling, the
# Qwen2 one with q/k/v biases and tied embeddings; prompts in their 80-token vocabularies), then SmolLM2 if present.
models=("llama fixture|tests/data/hf_fixtures/llama|ABC DEF 123, 456. GHI: 789|"
        "qwen2 fixture|tests/data/hf_fixtures/qwen2|ABC DEF 123, 456. GHI: 789|")
smollm=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$smollm" ]; then
    models+=("SmolLM2-135M|$smollm|What is the capital of France?|--chat")
else
    echo "SKIP  SmolLM2-135M: $smollm is not here (git-ignored, fetched by make model; the fixtures stand in)"
fi
for entry in "${models[@]}"; do
    IFS='|' read -r name model prompt flags <<<"$entry"
    ok=1
    for be in cpu cuda; do
        out="$LOGS/generate_${be}.txt"
        # shellcheck disable=SC2086  # flags is one optional word
        timeout 60 ./kvbench generate --backend "$be" --model "$model" $flags --max-new 24 --prompt "$prompt" \
            >"$out" 2>"$LOGS/generate.err"
        grc=$?
        if [ $grc -eq 0 ]; then
            printf '%s --backend %s: %s\n  %s\n' "$name" "$be" "$(tr '\n' ' ' <"$out")" "$(cat "$LOGS/generate.err")" \
                >>"$LOGS/e2e.log"
        else
            echo "FAIL  $name generate --backend $be (exit $grc, 124: timed out): $(tr '\n' ' ' <"$LOGS/generate.err")"
            failed+=("$name generate --backend $be")
            ok=0
        fi
    done
    if [ $ok -eq 1 ]; then
        if cmp -s "$LOGS/generate_cpu.txt" "$LOGS/generate_cuda.txt"; then same="the same text"; else
            same="different texts (bf16 against f32 can flip a greedy choice; the logits checks above are the test)"
        fi
        echo "PASS  $name: generate on cpu and cuda, $same"
    fi
done
cat "$LOGS/e2e.log"
finish
