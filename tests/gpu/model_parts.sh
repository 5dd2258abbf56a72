#!/usr/bin/env bash
# model_parts.sh — carry a model file to the lent GPU machine in parts, across several device calls.
#
# One device call carries at most 64 MiB: the working tree plus the paths it names in `carry`. The tree alone is
# most of that, so a GGUF (SmolLM2-135M: 98 MB) travels as parts, one call each: the machine keeps ignored files
# between calls while it stays warm, so the parts collect in .gpu-model/ there and the last call joins them.
#   bash tests/gpu/model_parts.sh room                 here: bytes one call can carry beside the tree (and EXTRA)
#   bash tests/gpu/model_parts.sh split MODEL [BYTES]  here: MODEL -> .gpu-model/NAME.part-K-of-N (default: room)
#   bash tests/gpu/model_parts.sh join MODEL           there: the parts -> MODEL, sha256-checked (models/SHA256SUMS)
# EXTRA (bytes, default 1 MiB of margin) is what the calls carry besides a part: the calls that bring parts
# carry nothing else, the last one (tests/gpu/next.sh) carries build-gpu-deps/ and .whl/ but no part.
# Every failure is one line naming the part or the file, exit 1; join writes MODEL.part and renames it only when
# the sha256 matches, so nothing half-written is left in models/.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR=.gpu-model
LIMIT=$((64 * 1024 * 1024))
fail() { echo "model_parts: $*" >&2; exit 1; }

room() {
    # what travels: tracked files and untracked files git does not ignore
    local tree
    tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null |
           awk '{ s += $1 } END { print s + 0 }')
    echo $((LIMIT - tree - ${EXTRA:-$((1024 * 1024))}))
}

case "${1:-}" in
room)
    room ;;
split)
    model=${2:?usage: model_parts.sh split MODEL [BYTES]}
    [ -f "$model" ] || fail "$model: no such file (make model fetches SmolLM2)"
    bytes=${3:-$(room)}
    [[ "$bytes" =~ ^[0-9]+$ ]] && [ "$bytes" -ge 1048576 ] ||
        fail "part size '$bytes' is not a number of bytes >= 1 MiB (the working tree leaves no room: $(room) bytes)"
    size=$(stat -c %s "$model")
    n=$(((size + bytes - 1) / bytes))
    name=$(basename "$model")
    mkdir -p "$DIR"
    rm -f "$DIR/$name".part-*
    for ((k = 1; k <= n; k++)); do
        dd if="$model" of="$DIR/$name.part-$k-of-$n" bs="$bytes" skip=$((k - 1)) count=1 status=none
    done
    echo "model_parts: $model ($size bytes) -> $n parts of at most $bytes bytes in $DIR/; carry one a call:"
    for ((k = 1; k <= n; k++)); do echo "  $DIR/$name.part-$k-of-$n"; done ;;
join)
    model=${2:?usage: model_parts.sh join MODEL}
    name=$(basename "$model")
    want=$(awk -v f="$model" '$2 == f { print $1 }' models/SHA256SUMS)
    [ -n "$want" ] || fail "models/SHA256SUMS has no line for $model"
    if [ -f "$model" ] && [ "$(sha256sum "$model" | cut -d' ' -f1)" = "$want" ]; then
        echo "model_parts: $model already here (sha256 checked)"
        exit 0
    fi
    shopt -s nullglob
    parts=("$DIR/$name".part-*-of-*)
    [ ${#parts[@]} -gt 0 ] || fail "no parts of $name in $DIR/ (carry them: model_parts.sh split)"
    n=${parts[0]##*-of-}
    for p in "${parts[@]}"; do [ "${p##*-of-}" = "$n" ] || fail "$p: from another split than ${parts[0]} (of $n)"; done
    tmp=$model.part
    trap 'rm -f "$tmp"' EXIT
    : >"$tmp"
    for ((k = 1; k <= n; k++)); do
        p="$DIR/$name.part-$k-of-$n"
        [ -f "$p" ] || fail "$p is missing (part $k of $n never arrived: carry it in one more call)"
        cat "$p" >>"$tmp"
    done
    got=$(sha256sum "$tmp" | cut -d' ' -f1)
    [ "$got" = "$want" ] || fail "$model joined from $n parts: sha256 $got, expected $want (a part is damaged)"
    mv "$tmp" "$model"
    trap - EXIT
    echo "model_parts: $model joined from $n parts (sha256 checked)" ;;
*)
    echo "usage: model_parts.sh room | split MODEL [BYTES] | join MODEL" >&2
    exit 2 ;;
esac
