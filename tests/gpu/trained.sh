#!/usr/bin/env bash
# trained.sh — trained weights on the GPU: SmolLM2-135M-Instruct's real GGUF on the cpu and cuda backends, the same
# real samples, answers and keep-sets compared. Runs on a lent GPU machine after tests/gpu/check.sh (which builds
# ./kvbench with CUDA into build/); the GGUF arrives in parts (tests/gpu/model_parts.sh) and is joined here.
#     bash tests/gpu/trained.sh [--keepsets-only | --answers-only]
# 1. join: the parts in .gpu-model/ -> models/SmolLM2-135M-Instruct.Q4_1.gguf, sha256-checked;
# 2. answers: tests/gpu/trained.json (10 samples, 4 over 4,096 tokens, so the multi-chunk prefill runs; the seven
#    methods at 20% and 40% and the full cache) run once per backend into one database; rows compared on
#    (sample, policy, aggregation, params, budget): identical predictions, and the score differences;
# 3. keep-sets: `kvbench select --keep-out` on 10 real contexts (6 over 4,096 tokens) for the seven methods at 20%,
#    cpu against cuda: the overlap |cpu ∩ cuda| / |cpu| per (layer, kv-head), its mean and minimum per method, and
#    the share of heads whose sets are identical.
# bf16 against f32 moves near-ties, so neither comparison can be exact; the script reports, and fails only on
# a broken run or a mean keep-set overlap under 0.95 (the random-weight checks of check_cuda see 0.99-1.00).
# Logs and trained_summary.txt go to $BUILD/gpu/ (and $OUT when set). About 2-4 minutes on 16 host cores (modelled,
# not yet measured).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
LOGS=$BUILD/gpu
MODEL=models/SmolLM2-135M-Instruct.Q4_1.gguf
mode=${1:-all}
# TRAINED_BACKEND=cpu runs the whole script on a machine without a GPU (cpu against cpu: every comparison must
# come out identical), which is how the script itself is tested
BACKEND=${TRAINED_BACKEND:-cuda}
mkdir -p "$LOGS"
failed=()
finish() {
    local verdict="TRAINED: PASS"
    [ ${#failed[@]} -eq 0 ] || { printf -v verdict 'TRAINED: FAIL: %s; ' "${failed[@]}"; verdict=${verdict%; }; }
    echo "$verdict" | tee -a "$LOGS/trained_summary.txt"
    if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
        for f in trained_summary.txt trained_run.log trained_keepsets.txt; do
            [ -f "$LOGS/$f" ] && cp "$LOGS/$f" "$OUT/"
        done
    fi
    [ ${#failed[@]} -eq 0 ]
    exit $?
}
: >"$LOGS/trained_summary.txt"

bash tests/gpu/model_parts.sh join "$MODEL" || { failed+=("join"); finish; }
if [ ! -x ./kvbench ] || ! ./kvbench --help 2>&1 | head -1 | grep -q "$BACKEND"; then
    make -j"$(nproc)" --no-print-directory CUDA=1 kvbench >"$LOGS/trained_build.log" 2>&1 ||
        { tail -n 20 "$LOGS/trained_build.log"; failed+=("build"); finish; }
fi

if [ "$mode" != --keepsets-only ]; then
    db=$LOGS/trained.db
    rm -f "$db" "$db-wal" "$db-shm"
    start=$SECONDS
    sed "s/\"backend\": \"cuda\"/\"backend\": \"$BACKEND\"/" tests/gpu/trained.json >"$LOGS/trained.json"
    if timeout 420 ./kvbench run "$LOGS/trained.json" --db "$db" >"$LOGS/trained_run.log" 2>&1; then
        echo "answers: kvbench run took $((SECONDS - start)) s" | tee -a "$LOGS/trained_summary.txt"
        python3 - "$db" <<'PY' | tee -a "$LOGS/trained_summary.txt" || failed+=("answers compare")
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute(
    "SELECT s.model, s.sample_key, s.context_tokens, r.policy, r.aggregation, r.params, r.budget, r.prediction,"
    " r.score, r.error FROM results r JOIN samples s ON s.id = r.sample_id").fetchall()
by = {}
for model, key, ctx, pol, agg, par, bud, pred, score, error in rows:
    by.setdefault((key, pol, agg, par, bud), {})[model.rsplit("-", 1)[-1]] = (pred, score, error, ctx)
pairs = [(k, v) for k, v in sorted(by.items()) if "cpu" in v and "cuda" in v]
errors = [(k, v) for k, v in pairs if v["cpu"][2] or v["cuda"][2]]
same = sum(v["cpu"][0] == v["cuda"][0] for k, v in pairs)
long_pairs = [(k, v) for k, v in pairs if (v["cpu"][3] or 0) > 4096]
long_same = sum(v["cpu"][0] == v["cuda"][0] for k, v in long_pairs)
samples = {k[0] for k, v in pairs}
d = [v["cuda"][1] - v["cpu"][1] for k, v in pairs if v["cpu"][1] is not None and v["cuda"][1] is not None]
print(f"answers: {len(samples)} samples, {len(pairs)} rows on both backends; identical predictions {same} of "
      f"{len(pairs)}; over 4,096 context tokens {long_same} of {len(long_pairs)}; failed rows {len(errors)}")
if d:
    print(f"answers: score cuda - cpu, mean {100 * sum(d) / len(d):+.2f} points, rows differing {sum(x != 0 for x in d)}")
for k, v in pairs:
    if v["cpu"][0] != v["cuda"][0]:
        print(f"  differs: {k[0]} {k[1]} {k[2]} {k[4]}: cpu {v['cpu'][0][:60]!r} | cuda {v['cuda'][0][:60]!r}")
sys.exit(1 if errors or len(pairs) == 0 else 0)
PY
    else
        echo "FAIL  kvbench run tests/gpu/trained.json (exit $?; 124: past 420 s): $(tail -n 3 "$LOGS/trained_run.log")"
        failed+=("answers run")
    fi
fi

if [ "$mode" != --answers-only ]; then
    # name|suite:task|index|data option: 4 RULER contexts at 4k, 3 multi_news and 3 lcc ones (6 over 4,096 tokens)
    contexts=("vt|ruler:vt|0|" "ns1|ruler:niah_single_1|0|" "nmk1|ruler:niah_multikey_1|0|" "cwe|ruler:cwe|0|")
    for i in 0 15 19; do contexts+=("mn$i|longbench:multi_news|$i|datasets/assets/longbench/subsets"); done
    for i in 1 2 10; do contexts+=("lcc$i|longbench:lcc|$i|datasets/assets/longbench/subsets"); done
    policies=(streamingllm snapkv adakv cake criticalkv defensivekv layer-defensivekv)
    dir=$LOGS/keepsets
    rm -rf "$dir" && mkdir -p "$dir"
    jobs=()
    for entry in "${contexts[@]}"; do
        IFS='|' read -r name spec index data <<<"$entry"
        ./kvbench data show "$spec" --index "$index" ${data:+--data "$data"} --model "$MODEL" >"$dir/$name.show" 2>&1 ||
            { echo "FAIL  data show $spec --index $index: $(head -n 1 "$dir/$name.show")"; failed+=("data show $name"); continue; }
        # the context is the N bytes after the "----- context (N bytes) -----" line
        python3 - "$dir/$name.show" "$dir/$name.txt" <<'PY' || { failed+=("context $name"); continue; }
import re, sys
raw = open(sys.argv[1], "rb").read()
m = re.search(rb"----- context \((\d+) bytes\) -----\n", raw)
if not m:
    sys.exit(f"{sys.argv[1]}: no context header")
open(sys.argv[2], "wb").write(raw[m.end():m.end() + int(m.group(1))])
PY
        for p in "${policies[@]}"; do jobs+=("$name $p"); done
    done
    start=$SECONDS
    # the cpu side in parallel (4 threads each), then the cuda side one at a time
    printf '%s\n' "${jobs[@]}" | OMP_NUM_THREADS=4 xargs -P "$(( $(nproc) / 4 > 0 ? $(nproc) / 4 : 1 ))" -L 1 \
        sh -c './kvbench select --backend cpu --model "$0" --file "$1/$2.txt" --policy "$3" --budget 20% \
               --keep-out "$1/$2.$3.cpu" >"$1/$2.$3.cpu.log" 2>&1' "$MODEL" "$dir"
    for j in "${jobs[@]}"; do
        set -- $j
        ./kvbench select --backend "$BACKEND" --model "$MODEL" --file "$dir/$1.txt" --policy "$2" --budget 20% \
            --keep-out "$dir/$1.$2.cuda" >"$dir/$1.$2.cuda.log" 2>&1
    done
    echo "keep-sets: ${#jobs[@]} selections per backend in $((SECONDS - start)) s" | tee -a "$LOGS/trained_summary.txt"
    python3 - "$dir" "${policies[@]}" <<'PY' | tee "$LOGS/trained_keepsets.txt" | tee -a "$LOGS/trained_summary.txt" ||
import glob, os, sys
d, policies = sys.argv[1], sys.argv[2:]
def load(path):
    with open(path) as f:
        head = f.readline().split()
        sets = [set(map(int, line.split()[3:])) for line in f]
    return int(head[7]), sets  # "kvbench-keepset 1 layers N kv_heads K context L"
bad = 0
for p in policies:
    overlaps, identical, heads, ctx_long, missing = [], 0, 0, 0, []
    for cpu in sorted(glob.glob(f"{d}/*.{p}.cpu")):
        cuda = cpu[:-3] + "cuda"
        if not os.path.exists(cuda):
            missing.append(os.path.basename(cuda))
            continue
        L, a = load(cpu)
        _, b = load(cuda)
        ctx_long += L > 4096
        for x, y in zip(a, b):
            heads += 1
            identical += x == y
            overlaps.append(len(x & y) / len(x) if x else float(not y))
    n_ctx = len(glob.glob(f"{d}/*.{p}.cpu"))
    if not overlaps:
        print(f"keep-sets {p}: no pair of files ({n_ctx} cpu files, missing {missing[:3]})")
        bad += 1
        continue
    mean = sum(overlaps) / len(overlaps)
    bad += mean < 0.95 or bool(missing)
    print(f"keep-sets {p}: {n_ctx} contexts ({ctx_long} over 4,096 tokens), {heads} (layer, kv-head) pairs: overlap "
          f"mean {mean:.4f} min {min(overlaps):.4f}; identical heads {identical / heads:.4f}"
          + (f"; missing {missing}" if missing else ""))
sys.exit(1 if bad else 0)
PY
        failed+=("keep-sets")
fi
finish
