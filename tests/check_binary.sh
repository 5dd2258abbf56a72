#!/usr/bin/env bash
# check_binary.sh — run by `make check` after the sanitizer run: ./kvbench must still be the optimised build (the
# sanitizer tree links build-san/kvbench), and up to date for a plain `make`. Silent when both hold, so the
# sanitizer run's closing count stays the last line; one line and exit 1 otherwise.
set -u
cd "$(dirname "$0")/.."
fail() { echo "check_binary: $*" >&2; exit 1; }
[ -x kvbench ] || fail "./kvbench is missing after make check"
if grep -q __asan_init kvbench; then fail "./kvbench is a sanitizer build (it has ASan symbols)"; fi
make --no-print-directory -q kvbench || fail "a plain make would rebuild ./kvbench after make check"
if make --no-print-directory -n sanitize 2>/dev/null | grep -Eq -- '-o kvbench( |$)'; then fail "make sanitize would link ./kvbench"; fi
exit 0
