#!/usr/bin/env bash
# emulate.sh — the CUDA backend on the CPU, for a machine without a GPU (the emulator is tests/gpu/emu/):
#     bash tests/gpu/emulate.sh [--quick] [--asan]            kernels: gather and RoPE against the host formula,
#                                                            then the kernel lab against the naive oracle
#     bash tests/gpu/emulate.sh --backend [--asan] [MODEL]    the GPU check's CUDA-against-CPU part (check_model
#                                                            of check_cuda.c) on MODEL, default
#                                                            synthetic:smollm2-135m:layers=2
#     bash tests/gpu/emulate.sh --policies [--asan]           the GPU check's device scoring part: every policy x
#                                                            aggregation x budget on random observations, keep-sets
#                                                            equal to the host's bit for bit, a planted error caught
# Translates engine/cuda/*.cu for a host compiler (dynamic shared memory becomes the emulator's buffer, static
# __shared__ becomes static, kernel<<<...>>>(...) becomes an emulated launch) and builds them with
# tests/gpu/emu/. --quick runs smaller lab shapes (seconds instead of minutes); --asan adds AddressSanitizer and
# UBSan, so an out-of-bounds index in a kernel stops the run at its line. Tolerances are the GPU check's. Not a
# substitute for tests/gpu/check.sh: no timing, no memory model, no real tensor cores. --backend builds the C
# library into $EMU_BUILD (default build-emu, build-emu-asan) with the CUDA backend declared (-DKVBENCH_CUDA);
# --policies builds the same and runs tests/gpu/emu/emu_policy.c.
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
quick="" backend=0 asan=0 model="" driver=emu_backend
for a in "$@"; do
    case $a in
        --quick) quick=--quick ;;
        --asan) asan=1 ;;
        --backend) backend=1 ;;
        --policies) backend=1 driver=emu_policy ;;
        -*) echo "emulate.sh: unknown option '$a' (--quick, --asan, --backend, --policies)" >&2; exit 2 ;;
        *) model=$a ;;
    esac
done
flags=(-O2) build=${EMU_BUILD:-build-emu}
if [ $asan -eq 1 ]; then
    flags=(-O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)
    build=${EMU_BUILD:-build-emu-asan}
fi
# CUDA code reads memory through other types (uint4 loads of bf16 rows); host C++ would call that undefined.
flags+=(-fno-strict-aliasing)
out=$(mktemp -d "${TMPDIR:-/tmp}/kvbench_emu.XXXXXX")
trap 'rm -rf "$out"' EXIT
python3 - "$out" <<'PY'
import os, re, sys
out = sys.argv[1]
for name in ('kernels', 'cuda_lab', 'cuda_backend', 'cuda_policy'):
    src = f'policies/{name}.cu' if name == 'cuda_policy' else f'engine/cuda/{name}.cu'
    if name == 'kernels': src = os.environ.get('EMU_KERNELS', src)  # another version of the kernels, to compare
    s = open(src).read()
    s = re.sub(r'extern __shared__ (?:__align__\(\d+\) )?([\w ]+?) (\w+)\[\];', r'\1 *\2 = (\1 *)emu::dyn_smem();', s)
    s = s.replace('__shared__', 'static')
    s = re.sub(r'(\w+(?:<[\w ]*>)?)<<<(.*?)>>>\(', r'emu::Launcher(\2).run(\1, ', s, flags=re.S)
    if '<<<' in s or '__shared__' in s:
        sys.exit(f'emulate.sh: could not translate {src}')
    open(f'{out}/{name}.cpp', 'w').write(f'#line 1 "{src}"\n' + s)
PY
cxx=(g++ -std=c++20 -g "${flags[@]}" -Wall -Wextra -Wno-unused-function -Wno-unused-parameter -Wno-unknown-pragmas
     -Itests/gpu/emu -Iengine/cuda -Ipolicies -I"$out")
"${cxx[@]}" -c -o "$out/cuda_emu.o" tests/gpu/emu/cuda_emu.cpp
"${cxx[@]}" -c -o "$out/kernels.o" "$out/kernels.cpp"
if [ $backend -eq 0 ]; then
    gcc -std=c11 -D_GNU_SOURCE "${flags[@]}" -c -o "$out/err.o" engine/err.c
    "${cxx[@]}" -c -o "$out/emu_main.o" tests/gpu/emu/emu_main.cpp # includes cuda_lab.cpp (its static cases)
    g++ "${flags[@]}" -o "$out/emu_main" "$out"/*.o -lm
    "$out/emu_main" $quick
    exit 0
fi
make -s --no-print-directory BUILD="$build" CUDA=0 OPT="${flags[*]} -DKVBENCH_CUDA" "$build/libkvbench.a"
ldlibs=$(make -s --no-print-directory CUDA=0 --eval='print-ldlibs: ; @echo $(LDLIBS)' print-ldlibs)
"${cxx[@]}" -c -o "$out/cuda_lab.o" "$out/cuda_lab.cpp"
"${cxx[@]}" -c -o "$out/cuda_backend.o" "$out/cuda_backend.cpp"
"${cxx[@]}" -c -o "$out/cuda_policy.o" "$out/cuda_policy.cpp"
gcc -std=c11 -D_GNU_SOURCE "${flags[@]}" -fopenmp -Wall -Wextra -Wno-unused-function -DKVBENCH_CUDA \
    -c -o "$out/$driver.o" tests/gpu/emu/$driver.c
g++ "${flags[@]}" -fopenmp -o "$out/$driver" "$out/$driver.o" "$out/cuda_backend.o" "$out/cuda_lab.o" \
    "$out/cuda_policy.o" "$out/kernels.o" "$out/cuda_emu.o" "$build/libkvbench.a" $ldlibs
"$out/$driver" ${model:+"$model"}
