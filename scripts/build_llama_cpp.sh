#!/usr/bin/env bash
# build_llama_cpp.sh [BUILD_DIR] [lib|all] — llama.cpp for the benchmark's peer, built from the sources that PyPI's
# llama-cpp-python sdist vendors (PyPI is the one source this project fetches from). Downloads the sdist,
# extracts vendor/llama.cpp and builds, with llama.cpp's own CMake defaults (native CPU flags, OpenMP), the
# shared libllama (tests/peer_llama.c links it) and, unless `lib` is asked for, llama.cpp's own llama-bench
# (which needs llama.cpp's larger `common` library too: several more minutes). Cached: a rerun with the
# outputs in place only prints their directory. Prints, as its last line, the directory holding the outputs:
#   DIR/lib/libllama.so, DIR/include/llama.h, DIR/bin/llama-bench, DIR/COMMIT (the vendored llama.cpp commit)
# LLAMA_CPP_PYTHON_VERSION picks the sdist (default below); the log of the build goes to DIR.log.
set -euo pipefail
build=${1:-build}
what=${2:-all}
[ "$what" = lib ] || [ "$what" = all ] || { echo "build_llama_cpp: the second argument is lib or all, not '$what'" >&2; exit 1; }
version=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
dir=$build/llama.cpp/$version
jobs=${BUILD_JOBS:-$(nproc)}

have_lib() { [ -f "$dir/lib/libllama.so" ] && [ -f "$dir/include/llama.h" ] && [ -f "$dir/COMMIT" ]; }
# llama-bench counts as built only when every library it links resolves from DIR/lib (an older cache copied
# the binary without libllama-bench-impl.so / libllama-common.so, and llama-bench then failed to start).
have_bench() { [ -x "$dir/bin/llama-bench" ] && ! LD_LIBRARY_PATH="$dir/lib" ldd "$dir/bin/llama-bench" 2>&1 | grep -q 'not found'; }
if have_lib && { [ "$what" = lib ] || have_bench; }; then
    echo "$dir"
    exit 0
fi
mkdir -p "$dir"
exec 9>"$dir.lock"
flock 9 # one build at a time (two `make bench` at once share this directory); the second reuses the first's
if have_lib && { [ "$what" = lib ] || have_bench; }; then
    echo "$dir"
    exit 0
fi
log=$dir.log
sdist=$dir/llama_cpp_python-$version.tar.gz
if [ ! -f "$sdist" ]; then
    echo "build_llama_cpp: downloading the llama-cpp-python $version sdist from PyPI" >&2
    python3 -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$dir" >>"$log" 2>&1 || {
        echo "build_llama_cpp: pip could not download llama-cpp-python==$version (see $log)" >&2
        exit 1
    }
fi
# A build directory moved from elsewhere (a copied or renamed tree) keeps CMake's old absolute paths and fails:
# configure it anew in place.
if [ -f "$dir/cmake/CMakeCache.txt" ] &&
    [ "$(sed -n 's/^CMAKE_CACHEFILE_DIR:INTERNAL=//p' "$dir/cmake/CMakeCache.txt")" != "$(cd "$dir/cmake" && pwd -P)" ]; then
    echo "build_llama_cpp: $dir/cmake was configured in another directory; configuring it again here" >&2
    rm -rf "$dir/cmake"
fi
if [ ! -f "$dir/cmake/CMakeCache.txt" ]; then
    rm -rf "$dir/src"
    mkdir -p "$dir/src"
    tar -xzf "$sdist" -C "$dir/src" --strip-components=3 "llama_cpp_python-$version/vendor/llama.cpp" || {
        echo "build_llama_cpp: $sdist holds no vendor/llama.cpp" >&2
        exit 1
    }
    echo "build_llama_cpp: building llama.cpp (llama-cpp-python $version's vendored copy) with $jobs jobs; log: $log" >&2
    cmake -S "$dir/src" -B "$dir/cmake" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF \
        -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON \
        >>"$log" 2>&1 || { echo "build_llama_cpp: cmake configure failed (see $log)" >&2; exit 1; }
fi
build_target() {
    cmake --build "$dir/cmake" -j "$jobs" --target "$1" >>"$log" 2>&1 || {
        echo "build_llama_cpp: the build of $1 failed (see $log)" >&2
        exit 1
    }
}
mkdir -p "$dir/bin" "$dir/lib" "$dir/include"
if ! have_lib; then
    build_target llama
    find "$dir/cmake" -name '*.so*' \( -name 'libllama*' -o -name 'libggml*' \) -exec cp -P {} "$dir/lib/" \;
    cp "$dir/src/include/llama.h" "$dir/src/ggml/include/"*.h "$dir/include/"
    # The sdist carries llama-cpp-python's git metadata: its submodule's HEAD is the vendored llama.cpp commit.
    commit=$(tar -xzOf "$sdist" "llama_cpp_python-$version/.git/modules/vendor/llama.cpp/HEAD" 2>/dev/null | cut -c1-12 || true)
    echo "${commit:-unknown}" >"$dir/COMMIT"
fi
if [ "$what" = all ]; then
    echo "build_llama_cpp: building llama.cpp's llama-bench (and its common library; minutes); log: $log" >&2
    build_target llama-bench
    cp "$dir/cmake/bin/llama-bench" "$dir/bin/"
    find "$dir/cmake" -name 'libllama*.so*' -exec cp -P {} "$dir/lib/" \; # llama-bench's own libraries too
    have_bench || {
        echo "build_llama_cpp: llama-bench still misses libraries in $dir/lib: $(LD_LIBRARY_PATH="$dir/lib" ldd "$dir/bin/llama-bench" 2>&1 | grep 'not found' | tr '\n' ' ')" >&2
        exit 1
    }
fi
echo "$dir"
