#!/usr/bin/env bash
# check_includes.sh — run by `make test`: the arrows of docs/architecture.md hold. Each `#include "../X/..."`
# between top-level folders is one the drawing allows (below: so runs/ and report/ never include each other, and
# nothing includes cli/), and they form no circle; inside engine/cpu/ and report/ the rooms (a file and its header
# are one room) include each other one way. A broken rule gets one line naming it and exit 1; else one line, exit 0.
set -u
cd "$(dirname "$0")/.."
folders="engine policies datasets metrics store runs report cli"
allowed() {  # the folders $1 may include
    case $1 in
        engine) echo "" ;;
        policies|datasets|metrics|store) echo "engine" ;;
        report) echo "engine metrics policies store" ;;
        runs) echo "engine datasets metrics policies store" ;;
        cli) echo "engine datasets metrics policies store runs report" ;;
    esac
}
fail() { echo "check_includes: $*" >&2; exit 1; }

# "from to" pairs of top-level folders, one per include that crosses between them (engine/cpu, engine/cuda are engine)
edges=$(for from in $folders; do
    find "$from" -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' | while read -r file; do
        grep -o '#include "\(\.\./\)\+[a-z_]*/' "$file" | sed 's@.*"\(\.\./\)*@@; s@/$@@' | while read -r to; do
            [ "$to" != "$from" ] && echo "$from $to"
        done
    done
done | sort -u)
[ -n "$edges" ] || fail "found no include between folders (run from the repository root)"
for folder in $folders; do [ -d "$folder" ] || fail "folder $folder/ is missing"; done
while read -r from to; do
    case " $(allowed "$from") " in *" $to "*) ;; *) fail "$from/ includes $to/, which docs/architecture.md's arrows do not allow" ;; esac
done <<< "$edges"
circle=$(echo "$edges" | tsort 2>&1 > /dev/null) || fail "the top-level folders include each other in a circle: $(echo $circle)"

# rooms inside a folder: file stem → included stem (same folder only)
rooms() {
    for file in "$1"/*.[ch]; do
        stem=$(basename "$file"); stem=${stem%.*}
        grep -o '#include "[a-z_0-9]*\.h"' "$file" | sed 's/#include "\(.*\)\.h"/\1/' | while read -r to; do
            [ "$to" != "$stem" ] && echo "$stem $to"
        done
    done | sort -u
}
for folder in engine/cpu report; do
    circle=$(rooms "$folder" | tsort 2>&1 > /dev/null) || fail "the files of $folder/ include each other in a circle: $(echo $circle)"
done
echo "check_includes: $(echo "$edges" | wc -l) arrows between $(echo $folders | wc -w) folders, no circle; engine/cpu/ and report/ one way"
