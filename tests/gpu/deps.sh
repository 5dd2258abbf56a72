#!/usr/bin/env bash
# deps.sh — packs the libraries kvbench builds against into build-gpu-deps/deps.tar.xz, for a GPU machine that
# cannot install packages (no network) and whose image may lack them:
#     bash tests/gpu/deps.sh          (here, on a Debian machine with apt; writes build-gpu-deps/deps.tar.xz)
# Then carry build-gpu-deps to the GPU machine; tests/gpu/check.sh unpacks it into a private prefix and puts it
# on the compiler's and loader's paths (nothing is installed into /). Holds the headers and shared libraries of
# cJSON, OpenBLAS (pthread build, with libgfortran and libquadmath), SQLite, libzip and zlib, plus GNU make:
# about 9 MB, so that it fits with the working tree in the device tool's 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.." || exit 1
out=build-gpu-deps
packages=(libcjson1 libcjson-dev libopenblas0-pthread libopenblas-pthread-dev libgfortran5 libquadmath0
          libsqlite3-0 libsqlite3-dev libzip4 libzip-dev zlib1g zlib1g-dev make)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root" "$work/prefix/include" "$work/prefix/lib" "$work/prefix/bin"
(cd "$work/debs" && apt-get download "${packages[@]}" >/dev/null 2>"$work/apt.log") || {
    echo "deps.sh: apt-get download failed:" >&2
    tail -n 5 "$work/apt.log" >&2
    exit 1
}
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/root"; done
r=$work/root p=$work/prefix
cp -a "$r"/usr/include/cjson "$r"/usr/include/sqlite3.h "$r"/usr/include/sqlite3ext.h "$r"/usr/include/zip.h \
    "$r"/usr/include/zipconf.h "$r"/usr/include/zlib.h "$r"/usr/include/zconf.h \
    "$r"/usr/include/x86_64-linux-gnu/openblas-pthread/*.h "$p/include/"
# Shared objects with their symlinks; Debian's alternatives (libopenblas.so in the main directory, libz.so's
# absolute target) are made here as plain relative links.
cp -a "$r"/usr/lib/x86_64-linux-gnu/libcjson.so* "$r"/usr/lib/x86_64-linux-gnu/libgfortran.so.5* \
    "$r"/usr/lib/x86_64-linux-gnu/libquadmath.so.0* "$r"/usr/lib/x86_64-linux-gnu/libsqlite3.so* \
    "$r"/usr/lib/x86_64-linux-gnu/libzip.so* "$r"/lib/x86_64-linux-gnu/libz.so.1* \
    "$r"/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas*.so* "$p/lib/"
ln -sf libz.so.1 "$p/lib/libz.so"
cp "$r"/usr/bin/make "$p/bin/make"
mkdir -p "$out"
tar -C "$p" -cJf "$out/deps.tar.xz" .
echo "deps.sh: $out/deps.tar.xz ($(du -h "$out/deps.tar.xz" | cut -f1)): ${packages[*]}"
