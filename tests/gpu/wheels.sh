#!/usr/bin/env bash
# wheels.sh — here, before a device call: the Python wheels tests/gpu/kvpress_side.py needs on a lent GPU machine
# that its image lacks (kvpress 0.5.5 asks for transformers < 5.3, the image has 5.x; transformers 4.57 then asks
# for its own tokenizers and huggingface_hub; kvpress imports datasets and fire at import; fire 0.6 has no wheel, 0.7.1 serves its one call), into .whl/ (git-ignored,
# carried: about 17 MB). On the device, before the script:
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
set -euo pipefail
cd "$(dirname "$0")/../.."
rm -rf .whl && mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
    kvpress==0.5.5 transformers==4.57.0 tokenizers==0.22.2 huggingface_hub==0.36.2 datasets==4.8.5 dill==0.4.0 \
    multiprocess==0.70.18 fire==0.7.1 termcolor==3.2.0 cachetools==5.5.2
du -sh .whl
