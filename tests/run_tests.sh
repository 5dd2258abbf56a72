#!/usr/bin/env bash
# run_tests.sh BUILD_DIR TEST... — runs each test binary from the project root, shows its output, and adds
# up the "NAME: N passed, N failed, N skipped" lines into the closing "N passed, N failed, N skipped" (a line
# without ", N skipped", as tests/slurm/test_slurm.sh prints, counts no skip). A binary that crashes or prints
# no count line counts as one failure.
set -u
build=$1; shift
total_pass=0; total_fail=0; total_skip=0
for t in "$@"; do
    out=$(mktemp)
    "$build/tests/$t" > "$out" 2>&1
    rc=$?
    cat "$out"
    line=$(grep -E '^[A-Za-z0-9_./-]+: [0-9]+ passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "$t: exited $rc without a result line"
        total_fail=$((total_fail + 1))
    else
        p=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\1/')
        f=$(echo "$line" | sed -E 's/.*: ([0-9]+) passed, ([0-9]+) failed.*/\2/')
        s=$(echo "$line" | sed -E -n 's/.*, ([0-9]+) skipped$/\1/p')
        total_pass=$((total_pass + p)); total_fail=$((total_fail + f)); total_skip=$((total_skip + ${s:-0}))
        if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
            echo "$t: exited $rc"
            total_fail=$((total_fail + 1))
        fi
    fi
    rm -f "$out"
done
echo "$total_pass passed, $total_fail failed, $total_skip skipped"
[ "$total_fail" -eq 0 ]
