#!/usr/bin/env bash
# check.sh — the GPU check of the CUDA backend, on a machine with an NVIDIA GPU (Hopper or newer):
#     bash tests/gpu/check.sh [--quick]        (--quick skips the 32k-token timings)
# Builds kvbench with CUDA (make CUDA=1), builds tests/gpu/check_cuda.c against build/libkvbench.a and runs it
# (kernel lab, CUDA against CPU on synthetic models, bad input, then speed against ceilings measured in the same
# run), then generates with the shipped SmolLM2-135M GGUF on both backends. Prints PASS/FAIL per check and a
# closing SUMMARY line; exits non-zero if anything failed. Takes about 3 to 8 minutes. Logs go to build/gpu/.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
failed=()
step() { printf '\n### %s\n' "$*"; }

step "device"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
else
    echo "nvidia-smi not found (the check program reports what the CUDA runtime sees)"
fi

step "build: make CUDA=1"
mkdir -p build/gpu
# The Makefile finds /usr/local/cuda/bin/nvcc but calls `nvcc`: make sure that name resolves.
command -v nvcc >/dev/null || export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"
jobs=$(nproc 2>/dev/null || echo 4)
make --no-print-directory CUDA=1 info
if make -j"$jobs" CUDA=1 kvbench >build/gpu/build.log 2>&1; then
    echo "PASS  build (log: build/gpu/build.log)"
else
    tail -n 40 build/gpu/build.log
    echo "FAIL  build (log: build/gpu/build.log)"
    printf '\nSUMMARY: FAIL (build)\n'
    exit 1
fi

step "check program: tests/gpu/check_cuda.c"
# The link flags come from the Makefile, so the two never disagree.
ldlibs=$(make -s --no-print-directory CUDA=1 --eval='print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
if ! gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -fopenmp -DKVBENCH_CUDA -o build/gpu/check_cuda \
        tests/gpu/check_cuda.c build/libkvbench.a $ldlibs; then
    printf '\nSUMMARY: FAIL (check program does not build)\n'
    exit 1
fi
timeout 480 build/gpu/check_cuda "$@" 2>&1 | tee build/gpu/check.log
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || failed+=("check_cuda (exit $rc)")

step "end to end: kvbench generate on SmolLM2-135M-Instruct, cpu then cuda"
model=models/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$model" ]; then
    generated=0
    for be in cpu cuda; do
        if timeout 120 ./kvbench generate --backend "$be" --model "$model" --chat --max-new 24 \
                --prompt "What is the capital of France?" >"build/gpu/generate_$be.txt" 2>"build/gpu/generate_$be.err"; then
            echo "PASS  generate --backend $be: $(tr '\n' ' ' <"build/gpu/generate_$be.txt")"
            cat "build/gpu/generate_$be.err"
            generated=$((generated + 1))
        else
            echo "FAIL  generate --backend $be: $(cat "build/gpu/generate_$be.err")"
            failed+=("generate --backend $be")
        fi
    done
    if [ "$generated" -eq 2 ]; then
        if cmp -s build/gpu/generate_cpu.txt build/gpu/generate_cuda.txt; then
            echo "same text from both backends"
        else
            echo "note: the texts differ (bf16 against f32 can change a greedy choice; see the logits checks above)"
        fi
    fi
else
    echo "FAIL  $model is missing (make model)"
    failed+=("model missing")
fi

if [ ${#failed[@]} -eq 0 ]; then
    printf '\nSUMMARY: PASS (all GPU checks; speed targets are listed above as pass/MISS)\n'
    exit 0
fi
printf '\nSUMMARY: FAIL: %s\n' "${failed[*]}"
exit 1
