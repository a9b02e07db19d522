#!/usr/bin/env bash
# The real-GPU measurements of issue 13, on the GPU machine, from the kit that
# tools/gpu/pack.sh built (device-carry/kit.tar.xz). From the repository root:
#
#   bash tools/gpu/run.sh parity sanitize         # one call
#   bash tools/gpu/run.sh deberta                 # another
#   bash tools/gpu/run.sh lepus beam label ncu    # ...
#
# Steps (each writes <step>.log, and JSON where noted, into $OUT, or gpu-out/ when
# $OUT is unset; a failing step is reported and the next one runs):
#   parity    tests/gpu_parity + tests/cuda_probe on the GPU (f32, bf16, f16 tables,
#             whole models), HOPSCORE_REQUIRE_GPU=1 so that nothing skips
#   sanitize  compute-sanitizer memcheck and racecheck on the bf16 op table
#   deberta   tools/bench_reference.py: deberta-v3-large and -base, L = 128/256/512, bf16,
#             HF eager, disentangled-flash, flashdeberta and hopscore on the same
#             weights (deberta-*.jsonl), plus `hopscore bench --profile` at L = 512
#   lepus     tools/bench_decoder_reference.py: SmolLM2-135M and GPT-2 shapes, bf16, the
#             LEPUS prompts of every passage of the first 50 HotpotQA questions, HF sdpa
#             vs hopscore, per-token |Δ log p| (lepus-*.jsonl)
#   beam      a random base-size Beam Retrieval checkpoint; `hopscore beam --device cuda`
#             over the 600 HotpotQA questions (bf16 and f32) and `--device cpu` over the
#             first 100; chains compared (compare_outputs.py)
#   label     random base-size EfficientRAG Labeler + Filter; `hopscore label` on 100
#             questions, cuda f32 and bf16 against cpu
#   ncu       Nsight Compute (--set full, one launch each) of disentangled attention,
#             causal attention and question_loglik (ncu-*.ncu-rep + a text summary)
# Time per step on an H100 (estimates until measured): parity 2 min, sanitize 3,
# deberta 6, lepus 4, beam 5, label 3, ncu 4. A call may run 10 minutes.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
kit=/tmp/hopscore-kit
work=/tmp/hopscore-work

setup() {
  if [[ ! -f $kit/kit.env ]]; then
    mkdir -p "$kit" && xz -dc device-carry/kit.tar.xz | tar -C "$kit" -xf - || return 1
  fi
  # shellcheck disable=SC1091
  source "$kit/kit.env"
  # The test executables read fixtures under the path they were built in.
  if [[ $manifest_dir != "$PWD" && ! -e $manifest_dir ]]; then
    mkdir -p "$(dirname "$manifest_dir")" && ln -s "$PWD" "$manifest_dir"
  fi
  mkdir -p weights "$work" && cp -rn "$kit/weights/deberta-v3-tokenizer" weights/
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$kit"/wheels/*.whl \
    >/dev/null 2>&1 || echo "setup: wheels not installed (the Triton engines will be skipped)"
  export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
  export HOPSCORE_SHARED_DATA=$kit/data HOPSCORE_THREADS=16
  H=$kit/bin/hopscore
  {
    echo "kit: $commit built $built"
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
    python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
  } >"$OUT/env.txt" 2>&1
  return 0
}

questions() { # questions N FILE: the first N questions of the HotpotQA sample
  [[ -f $work/q600.parquet ]] || $H import hotpotqa "$kit"/data/hotpot_dev_distractor_sample600.json.gz \
    --output "$work/q600.parquet" >/dev/null || return 1
  python3 - "$work/q600.parquet" "$1" "$2" <<'PY'
import sys, pyarrow.parquet as pq
t = pq.read_table(sys.argv[1])
pq.write_table(t.slice(0, int(sys.argv[2])), sys.argv[3])
PY
}

step_parity() {
  HOPSCORE_REQUIRE_GPU=1 "$kit/bin/cuda_probe" --nocapture &&
    HOPSCORE_REQUIRE_GPU=1 "$kit/bin/gpu_parity" --nocapture --test-threads=1
}

step_sanitize() {
  local rc=0
  compute-sanitizer --tool memcheck --print-limit 20 "$kit/bin/gpu_parity" ops_bf16 --nocapture || rc=1
  compute-sanitizer --tool racecheck --print-limit 20 "$kit/bin/gpu_parity" ops_bf16 --nocapture || rc=1
  return $rc
}

step_deberta() {
  local rc=0 shape
  for shape in deberta-v3-large deberta-v3-base; do
    python3 tools/bench_reference.py --device cuda --shape $shape --seq-lens 128,256,512 \
      --hopscore "$H" --json | tee "$OUT/$shape.jsonl" || rc=1
  done
  for shape in deberta-v3-large deberta-v3-base; do
    "$H" bench --device cuda --shape $shape --seq-len 512 --profile || rc=1
  done
  return $rc
}

step_lepus() {
  local rc=0 shape
  for shape in smollm2 gpt2; do
    python3 tools/bench_decoder_reference.py --device cuda --shape $shape --pairs 50 --all-passages \
      --data-dir "$kit/data" --gguf "$kit/weights/smollm2-metadata.gguf" --max-batch-tokens 16384 \
      --iters 5 --warmup 2 --hopscore "$H" --json | tee "$OUT/lepus-$shape.jsonl" || rc=1
  done
  return $rc
}

step_beam() {
  local m=$work/beam-base tok=weights/deberta-v3-tokenizer rc=0
  python3 tools/random_checkpoint.py --kind beam --shape base -o "$m" || return 1
  questions 600 "$work/q600s.parquet" && questions 100 "$work/q100.parquet" || return 1
  "$H" beam --model "$m" --tokenizer $tok --input "$work/q600s.parquet" --output "$work/beam-cuda-bf16.parquet" \
    --device cuda --dtype bf16 || rc=1
  "$H" beam --model "$m" --tokenizer $tok --input "$work/q100.parquet" --output "$work/beam-cuda-f32.parquet" \
    --device cuda --dtype f32 || rc=1
  "$H" beam --model "$m" --tokenizer $tok --input "$work/q100.parquet" --output "$work/beam-cpu.parquet" || rc=1
  echo "cpu f32 vs cuda f32 (100 questions):"
  python3 tools/gpu/compare_outputs.py "$work/beam-cpu.parquet" "$work/beam-cuda-f32.parquet" || rc=1
  echo "cuda f32 vs cuda bf16 (the first 100 of the 600):"
  python3 - "$work" <<'PY' || rc=1
import sys, pyarrow.parquet as pq
w = sys.argv[1]
t = pq.read_table(f"{w}/beam-cuda-bf16.parquet")
ids = set(pq.read_table(f"{w}/beam-cpu.parquet").column("id").to_pylist())
pq.write_table(t.filter([i in ids for i in t.column("id").to_pylist()]), f"{w}/beam-cuda-bf16-100.parquet")
PY
  python3 tools/gpu/compare_outputs.py "$work/beam-cpu.parquet" "$work/beam-cuda-bf16-100.parquet" || rc=1
  return $rc
}

step_label() {
  local tok=weights/deberta-v3-tokenizer rc=0 k
  for k in labeler filter; do
    python3 tools/random_checkpoint.py --kind $k --shape base -o "$work/$k-base" || return 1
  done
  questions 100 "$work/q100.parquet" || return 1
  local models=(--labeler "$work/labeler-base" --filter "$work/filter-base" --tokenizer $tok --input "$work/q100.parquet")
  "$H" label "${models[@]}" --output "$work/label-cpu.parquet" || rc=1
  "$H" label "${models[@]}" --output "$work/label-cuda-f32.parquet" --device cuda --dtype f32 || rc=1
  "$H" label "${models[@]}" --output "$work/label-cuda-bf16.parquet" --device cuda --dtype bf16 || rc=1
  echo "cpu f32 vs cuda f32:"
  python3 tools/gpu/compare_outputs.py "$work/label-cpu.parquet" "$work/label-cuda-f32.parquet" || rc=1
  echo "cpu f32 vs cuda bf16:"
  python3 tools/gpu/compare_outputs.py "$work/label-cpu.parquet" "$work/label-cuda-bf16.parquet" || rc=1
  return $rc
}

step_ncu() {
  local rc=0
  ncu --set full --launch-count 1 -k regex:disentangled_attention -o "$OUT/ncu-disentangled" -f \
    "$H" bench --device cuda --shape deberta-v3-large --seq-len 512 --batch 16 --warmup 0 --iters 1 || rc=1
  ncu --set full --launch-count 1 -k regex:causal_attention -o "$OUT/ncu-causal" -f \
    "$H" bench --device cuda --shape smollm2 --seq-len 512 --batch 16 --warmup 0 --iters 1 || rc=1
  python3 - "$work/pairs.json" <<'PY'
import json, random, sys
random.seed(0)
pairs = [{"ids": [random.randrange(3, 49152) for _ in range(300)], "target_start": 280} for _ in range(32)]
json.dump({"pairs": pairs}, open(sys.argv[1], "w"))
PY
  python3 - "$work/smollm2-random" <<'PY'
import argparse, sys, torch
from pathlib import Path
sys.path.insert(0, "tools")
from bench_decoder_reference import random_model_dir
random_model_dir(argparse.Namespace(shape="smollm2", seed=0), torch, Path(sys.argv[1]))
PY
  ncu --set full --launch-count 1 -k regex:question_loglik -o "$OUT/ncu-question-loglik" -f \
    "$H" bench-loglik --device cuda --model "$work/smollm2-random" --pairs "$work/pairs.json" --warmup 0 --iters 1 || rc=1
  for r in disentangled causal question-loglik; do
    [[ -f $OUT/ncu-$r.ncu-rep ]] && ncu --import "$OUT/ncu-$r.ncu-rep" --section SpeedOfLight \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy \
      --section WarpStateStats >"$OUT/ncu-$r.txt" 2>&1
  done
  return $rc
}

setup || { echo "setup failed: is device-carry/kit.tar.xz carried? (bash tools/gpu/pack.sh)"; exit 1; }
status=0
for s in "$@"; do
  if ! declare -F "step_$s" >/dev/null; then
    echo "unknown step $s (parity sanitize deberta lepus beam label ncu)"; status=2; continue
  fi
  t0=$(date +%s)
  if "step_$s" >"$OUT/$s.log" 2>&1; then r=ok; else r=FAILED; status=1; fi
  echo "$s: $r in $(($(date +%s) - t0)) s (log: $s.log)" | tee -a "$OUT/summary.txt"
  tail -n 25 "$OUT/$s.log"
done
exit $status
