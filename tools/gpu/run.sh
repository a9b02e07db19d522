#!/usr/bin/env bash
# The real-GPU measurements, on the GPU machine, from the kit that tools/gpu/pack.sh
# built (device-carry/kit.tar.xz). From the repository root, the next GPU hour is:
#
#   bash tools/gpu/run.sh next      # issue 55: doctor (the smoke test), parity per test,
#                                   # records, kernels, deberta-large peers, invariance,
#                                   # lepus; 560 s in all (NEXT below), rows checked for the card
#
# and any other list of steps:
#
#   bash tools/gpu/run.sh parity deberta-large ncu lepus beam label   # one call
#   bash tools/gpu/run.sh lepus:90 beam:60                           # budgets in seconds
#
# Every step runs under its own timeout (STEP:SECONDS, else its default below; a budget
# under the default is warned of: the step may not finish) and
# writes its log and JSON rows as it goes, so an overrun keeps what was measured; after
# each step they are tarred into $OUT/results.tar.gz, with $OUT/summary.txt beside it
# (a device call returns at most 8 files). Steps:
#   parity         tests/gpu_parity + tests/cuda_probe (f32, bf16, f16 tables, whole
#                  models), HOPSCORE_REQUIRE_GPU=1 so that nothing skips          (120 s)
#   deberta-large  tools/bench_reference.py, deberta-v3-large, L = 512/256/128, bf16,
#                  medians of HOPSCORE_KIT_ROUNDS (3) rounds: hopscore (the default v3
#                  attention; HOPSCORE_KIT_ATTENTION=v3,v5 adds v5) first, then HF eager,
#                  the Triton kernels that passed the call's one smoke test and HF eager
#                  under torch.compile; `bench --profile` (graphs on;
#                  HOPSCORE_KIT_GRAPHS=on,off adds off).
#                  HOPSCORE_KIT_LENS=512 times one length                         (300 s)
#   deberta-base   the same for deberta-v3-base at L = 512 and 128              (120 s)
#   ncu            Nsight Compute (--set full, one launch each) of disentangled attention
#                  (the kit's attention kernels), causal attention, the norms (layer_norm
#                  in DeBERTa-v3-large, rms_norm in SmolLM2) and question_loglik;
#                  HOPSCORE_KIT_NCU=disentangled,causal,norm,loglik picks the changed ones,
#                  `gemm` adds the CUTLASS GEMMs (gemm_bias_gelu, gemm_gated_silu, gemm_add_norm)  (150 s)
#   ncu-t5         Nsight Compute of t5_attention (the first launch: T5-large's encoder
#                  layer 0, 64 inputs of 400 tokens, bf16)                        (150 s)
#   lepus          tools/bench_decoder_reference.py: SmolLM2-135M and GPT-2 shapes, bf16,
#                  LEPUS prompts of every passage of the first 50 HotpotQA questions,
#                  HF sdpa (+ its body under torch.compile) vs hopscore, per-token
#                  |Δ log p|, medians of the rounds                                  (240 s)
#   beam           random base-size Beam Retrieval; `hopscore beam --device cuda` over
#                  600 questions (bf16) and 20 (f32) against `--device cpu` on those 20 (150 s)
#   label          random base-size EfficientRAG Labeler + Filter; `hopscore label` on 20
#                  questions, cuda f32 and bf16 against cpu                      (120 s)
#   embed          random MiniLM-shaped (sentence-transformers layout) and bert-base-shaped
#                  (Contriever layout) bi-encoders: tools/bench_embed_reference.py, the
#                  HotpotQA sample's 5,912 passages ×10 (bf16; MiniLM also f32), hopscore
#                  vs sentence-transformers on the GPU; then `retrieve` cuda f32 vs cpu (240 s)
#   rerank         random cross-encoders of ms-marco-MiniLM-L-6's and bge-reranker-base's
#                  shapes: tools/bench_rerank_reference.py, the HotpotQA slice's pairs
#                  ×RERANK_REPEAT, `hopscore rerank --device cuda` against
#                  sentence-transformers' CrossEncoder (HF sdpa) on the GPU, bf16 then f32,
#                  pairs/s (medians of the rounds) and max |Δ score|           (200 s)
#   lepus-prefix   `hopscore lepus` end to end on the first 50 HotpotQA questions with a random
#                  SmolLM2-shaped model (bf16): shared-prefix reuse on (the default) and off
#                  (--min-shared-prefix 0): the summary line (tokens/s), the share of prompt
#                  tokens saved, and the two outputs compared (the same bits expected) (200 s)
#   t5             tools/bench_t5_reference.py: T5-large v1.1 shape (random weights), LEPUS
#                  first-hop prompts of every passage of the first 50 HotpotQA questions,
#                  HF eager vs hopscore in bf16, then f32 (HOPSCORE_KIT_T5_DTYPES); |Δ log p|
#                  against HF f32                                                  (240 s)
#   gelu           `bench` deberta-v3-large L = 512 bf16, 3 interleaved rounds of: the erf
#                  GELU in the CUTLASS GEMM's epilogue (HOPSCORE_FUSED_GELU=on), the cuBLASLt GEMM +
#                  GELU pass (HOPSCORE_FUSED_GELU=off), the tanh form in cuBLASLt's epilogue
#                  (--tanh-gelu); medians in gelu.txt                             (120 s)
#   gate           `bench` SmolLM2-135M L = 512 × 64 bf16, 3 interleaved rounds of: the SiLU
#                  gate in the CUTLASS gate/up GEMM's epilogue (HOPSCORE_FUSED_GATE=on), the cuBLASLt
#                  GEMM + gated_act pass (HOPSCORE_FUSED_GATE=off); medians in gate.txt (120 s)
#   addnorm        `bench` deberta-v3-large L = 512 bf16, 3 interleaved rounds of: the
#                  output projections with the residual and LayerNorm in the CUTLASS GEMM's
#                  epilogue (HOPSCORE_FUSED_NORM=on), the cuBLASLt GEMM + layer_norm pass
#                  (HOPSCORE_FUSED_NORM=off); medians in addnorm.txt              (100 s)
#   sanitize       compute-sanitizer memcheck on the bf16 op table, racecheck on the
#                  attention and loglik rows only; both on disentangled v5 and tma_check (150 s)
#   invariance     the cost of the same bits in any batch: `bench` deberta-v3-large bf16 at
#                  L = 512 (a full batch) and at 8 × 128 tokens, `--batch-invariant on` and
#                  `off`, 3 interleaved rounds each; medians in invariance.txt (the
#                  bit-equality itself is tested by the parity step)              (150 s)
#
# Dry run without a GPU (HOPSCORE_KIT_EMU=DIR, the emulator's libraries from
# tools/cuda_emu/build.sh): the same script, with torch's CPU build for the references
#   doctor         `hopscore doctor --gpu-kernels latest` in bf16, f16 and f32: every kernel
#                  implementation in a child of its own, 20 s each; a kernel that does not
#                  pass makes every later step run --gpu-kernels proven (the summary says
#                  which), and the cached verdicts keep it out of every job           (60 s)
#   parity-each    tests/gpu_parity one test per process (30 s each, the proven path's
#                  tests first: ops_*, older_kernels_*), then cuda_probe; parity.txt (200 s)
#   records        kernels/proven.tsv rows for this card (proven-new.tsv) from `hopscore
#                  doctor --kernels`, written only when doctor and every parity test passed
#                  (a failure is not attributed to an entry: nothing is recorded)    (10 s)
#   kernels        `bench` deberta-v3-large L = 512 bf16, 3 interleaved rounds of:
#                  --gpu-kernels proven, latest, latest with --attention v5; each run
#                  bounded at 60 s; medians in kernels.txt                           (150 s)
# and shapes shrunk so each step takes seconds (tools/gpu/README.md).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
kit=/tmp/hopscore-kit
work=/tmp/hopscore-work
R=$work/results # logs, JSON rows and reports, tarred into $OUT after every step
mkdir -p "$OUT" "$R"
emu=${HOPSCORE_KIT_EMU:-}
declare -A BUDGET=([parity]=120 [deberta-large]=300 [deberta-base]=120 [ncu]=150
  [lepus]=240 [t5]=240 [ncu-t5]=150 [beam]=150 [label]=120 [sanitize]=150 [embed]=240 [rerank]=200 [gelu]=120
  [invariance]=150 [lepus-prefix]=200 [gate]=120 [addnorm]=100 [doctor]=60 [parity-each]=200
  [records]=10 [kernels]=150)
# `next`: the owed table of issue 55 in one device call (budgets in seconds; at most 570
# in all, which leaves a fresh machine's start inside a 600 s call).
# deberta-large at L = 512 against HF eager and torch.compile (no Triton smoke), lepus
# on SmolLM2's shape only.
NEXT=(doctor:40 parity-each:170 records:10 kernels:110 deberta-large:90 invariance:70 lepus:60)

# The directory holding `lib` (a soname), from the loader's cache, the CUDA toolkit or
# the NVIDIA pip wheels of the machine's Python; empty when none has it.
find_lib() {
  local lib=$1 d
  d=$(ldconfig -p 2>/dev/null | awk -v l="$lib" '$1 == l {print $NF; exit}')
  [[ -n $d ]] && { dirname "$d"; return; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
    [[ -e $d/$lib ]] && { echo "$d"; return; }
  done
  python3 - "$lib" 2>/dev/null <<'PY'
import glob, os, sys
try:
    import nvidia
except ImportError:
    sys.exit()
for root in nvidia.__path__:
    hits = sorted(glob.glob(os.path.join(root, "**", sys.argv[1]), recursive=True))
    if hits:
        print(os.path.dirname(hits[0]))
        break
PY
}

setup() { # setup [quick]: quick skips the GPU probe (already done by the parent run)
  # Unpacked once per kit: again when the carried kit is newer (a dry run here after
  # another pack.sh would otherwise run the old binaries against the new emulator).
  if [[ ! -f $kit/kit.env || device-carry/kit.tar.xz -nt $kit/kit.env ]]; then
    [[ -f device-carry/kit.tar.xz ]] || { echo "setup: device-carry/kit.tar.xz not carried (bash tools/gpu/pack.sh)"; return 1; }
    rm -rf "$kit" && mkdir -p "$kit" && xz -dc device-carry/kit.tar.xz | tar -C "$kit" -xf - || return 1
    touch "$kit/kit.env"
  fi
  # shellcheck disable=SC1091
  source "$kit/kit.env"
  # The test executables read fixtures under the path they were built in.
  if [[ $manifest_dir != "$PWD" && ! -e $manifest_dir ]]; then
    mkdir -p "$(dirname "$manifest_dir")" && ln -s "$PWD" "$manifest_dir"
  fi
  mkdir -p weights "$work"
  [[ -d weights/deberta-v3-tokenizer ]] || cp -r "$kit/weights/deberta-v3-tokenizer" weights/
  if [[ -n $emu ]]; then
    export LD_LIBRARY_PATH=$emu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} HOPSCORE_REFERENCE_TORCH_CPU=1
    export HOPSCORE_KIT_CARD="hopscore CPU emulator"
  else
    local lt cu
    cu=$(find_lib libcuda.so.1)
    lt=$(find_lib libcublasLt.so.13)
    [[ -n $cu ]] || { echo "setup: no libcuda.so.1 (is this the GPU machine?)"; return 1; }
    [[ -n $lt ]] || { echo "setup: no libcublasLt.so.13 in ldconfig, /usr/local/cuda or the nvidia pip wheels"; return 1; }
    export LD_LIBRARY_PATH=$lt:$cu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    # The card every row names (tools/bench_device.py, tools/gpu/check_rows.py).
    HOPSCORE_KIT_CARD=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
    export HOPSCORE_KIT_CARD=${HOPSCORE_KIT_CARD:-card unknown}
  fi
  if [[ ! -d /tmp/site ]]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$kit"/wheels/*.whl \
      >/dev/null 2>&1 || echo "setup: wheels not installed (the Triton engines will be skipped)"
  fi
  export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
  export HOPSCORE_DATA=$kit/data HOPSCORE_THREADS=${HOPSCORE_THREADS:-16} H=$kit/bin/hopscore
  if [[ ! -f $R/env.txt ]]; then
    {
      echo "kit: $commit built $built; LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
      [[ -n $emu ]] && echo "EMULATOR DRY RUN ($emu)" ||
        nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
      python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
      "$H" --version
    } >"$R/env.txt" 2>&1
  fi
  # The first second tells whether the binary can open the device at all.
  [[ ${1:-} == quick ]] && return 0
  # Bounded, on the proven kernels, without the self-test (the doctor step runs it):
  # a hang here returns the call with what it has.
  HOPSCORE_GPU_SELFTEST=off timeout -k 5 60 "$H" bench --device cuda --gpu-kernels proven --shape small \
    --seq-len 8 --batch 1 --warmup 0 --iters 1 --peak-gemm 0 >/dev/null 2>"$work/probe.err" ||
    { echo "setup: hopscore cannot use the GPU (exit $?):"; cat "$work/probe.err"; return 1; }
}

# Shapes and sizes: the real ones on a GPU, seconds-long ones in an emulator dry run.
if [[ -n $emu ]]; then
  LARGE=small BASE=small LENS_LARGE=16,32 LENS_BASE=16 DEC_PAIRS=1 DEC_PASSAGES= NQ=3 NQ_CPU=2 CK=small ITERS=1 SMALL=(--batch 2 --peak-gemm 0)
  EMBED_REPEAT=1 RERANK_REPEAT=1 RERANK_SHAPES=minilm-l6 T5=small T5_Q=1 T5_PROMPT=48 ROUNDS=1
else
  LARGE=deberta-v3-large BASE=deberta-v3-base LENS_LARGE=${HOPSCORE_KIT_LENS:-512,256,128}
  LENS_BASE=${HOPSCORE_KIT_LENS:-512,128}
  DEC_PAIRS=50 DEC_PASSAGES=--all-passages NQ=600 NQ_CPU=${HOPSCORE_KIT_NQ_CPU:-20} CK=base ITERS=10 SMALL=()
  EMBED_REPEAT=10 RERANK_REPEAT=25 RERANK_SHAPES=minilm-l6,xlmr-base T5=large T5_Q=50 T5_PROMPT=600 ROUNDS=${HOPSCORE_KIT_ROUNDS:-3}
fi

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
  # The emulator dry run takes one test that reads the fixtures (CI runs them all there).
  local only=()
  [[ -n $emu ]] && only=(deberta_models_f32)
  HOPSCORE_REQUIRE_GPU=1 "$kit/bin/cuda_probe" --nocapture &&
    HOPSCORE_REQUIRE_GPU=1 "$kit/bin/gpu_parity" "${only[@]}" --nocapture --test-threads=1
}

# The Triton engines that build and run a tiny model here (they target transformers
# 4.x; the machine has 5.x): a comma list, possibly empty; tested once per call.
triton_engines() {
  if [[ -f $work/triton-engines ]]; then cat "$work/triton-engines"; return; fi
  triton_smoke | tee "$work/triton-engines"
}
triton_smoke() {
  timeout 45 python3 tools/bench_reference.py --device cuda --shape small --seq-lens 128 --batch 2 \
    --iters 1 --warmup 1 --engines disentangled-flash,flashdeberta --no-check --json 2>"$work/smoke.err" |
    tee "$R/triton-smoke.jsonl" |
    python3 -c 'import json, sys
print(",".join(r["engine"] for r in map(json.loads, sys.stdin) if r.get("status") == "ok"))'
}

deberta() { # deberta SHAPE LENS
  local shape=$1 lens=$2 engines rc=0 attn graphs
  engines=hf-eager
  if [[ -z $emu && ${HOPSCORE_KIT_TRITON:-on} == on ]]; then
    local t
    t=$(triton_engines)
    echo "triton smoke: ${t:-none passed} (triton-smoke.jsonl; errors in the log below)"
    [[ -z $t ]] && tail -5 "$work/smoke.err"
    engines=$engines${t:+,$t},hf-compile # last: its compile time may run into the budget
  fi
  python3 tools/bench_reference.py --device cuda --shape "$shape" --seq-lens "$lens" \
    --engines "$engines" --iters $ITERS --rounds $ROUNDS "${SMALL[@]}" --hopscore "$H" \
    --hopscore-attention "$ATTENTION" --json >"$R/$shape.jsonl" || rc=1
  for attn in ${ATTENTION//,/ }; do
    for graphs in ${HOPSCORE_KIT_GRAPHS//,/ }; do
      echo "== hopscore bench --profile $shape L=${lens%%,*} attention $attn graphs $graphs"
      HOPSCORE_ATTENTION=$attn "$H" bench --device cuda --dtype bf16 --shape "$shape" --seq-len "${lens%%,*}" \
        --iters $ITERS "${SMALL[@]}" --cuda-graphs $graphs --profile || rc=1
    done
  done
  return $rc
}
step_deberta-large() { deberta $LARGE $LENS_LARGE; }
step_deberta-base() { deberta $BASE $LENS_BASE; }

step_ncu() {
  local rc=0 attn
  [[ -n $emu ]] && { echo "ncu: skipped in an emulator dry run"; return 0; }
  local NCU=(ncu --set full --clock-control none --launch-count 1 -f)
  local which=,${HOPSCORE_KIT_NCU:-disentangled,causal,norm,loglik},
  if [[ $which == *,disentangled,* ]]; then
    for attn in ${ATTENTION//,/ }; do
      HOPSCORE_ATTENTION=$attn "${NCU[@]}" -k regex:disentangled_attention -o "$R/ncu-disentangled-$attn" \
        "$H" bench --device cuda --shape deberta-v3-large --seq-len 512 --batch 16 --warmup 0 --iters 1 \
        --peak-gemm 0 --cuda-graphs off || rc=1
    done
  fi
  if [[ $which == *,causal,* ]]; then
    "${NCU[@]}" -k regex:causal_attention -o "$R/ncu-causal" \
      "$H" bench --device cuda --shape smollm2 --seq-len 512 --batch 16 --warmup 0 --iters 1 --peak-gemm 0 \
      --cuda-graphs off || rc=1
  fi
  if [[ $which == *,norm,* ]]; then
    # The layers' LayerNorms as the kernel (fused into the GEMM by default).
    HOPSCORE_FUSED_NORM=off "${NCU[@]}" -k regex:layer_norm -o "$R/ncu-layer-norm" \
      "$H" bench --device cuda --shape deberta-v3-large --seq-len 512 --batch 16 --warmup 0 --iters 1 \
      --peak-gemm 0 --cuda-graphs off || rc=1
    "${NCU[@]}" -k regex:rms_norm -o "$R/ncu-rms-norm" \
      "$H" bench --device cuda --shape smollm2 --seq-len 512 --batch 16 --warmup 0 --iters 1 --peak-gemm 0 \
      --cuda-graphs off || rc=1
  fi
  if [[ $which == *,gemm,* ]]; then
    "${NCU[@]}" -k regex:gemm_bias_gelu -o "$R/ncu-gemm-bias-gelu" \
      "$H" bench --device cuda --shape deberta-v3-large --seq-len 512 --batch 16 --warmup 0 --iters 1 \
      --peak-gemm 0 --cuda-graphs off || rc=1
    "${NCU[@]}" -k regex:gemm_gated -o "$R/ncu-gemm-gated" \
      "$H" bench --device cuda --shape smollm2 --seq-len 512 --batch 16 --warmup 0 --iters 1 --peak-gemm 0 \
      --cuda-graphs off || rc=1
    "${NCU[@]}" -k regex:gemm_add_norm -o "$R/ncu-gemm-add-norm" \
      "$H" bench --device cuda --shape deberta-v3-large --seq-len 512 --batch 16 --warmup 0 --iters 1 \
      --peak-gemm 0 --cuda-graphs off || rc=1
  fi
  if [[ $which == *,loglik,* ]]; then
    python3 - "$work/pairs.json" <<'PY'
import json, random, sys
random.seed(0)
pairs = [{"ids": [random.randrange(3, 49152) for _ in range(300)], "target_start": 280} for _ in range(32)]
json.dump({"pairs": pairs}, open(sys.argv[1], "w"))
PY
    smollm2_random && "${NCU[@]}" -k regex:question_loglik -o "$R/ncu-question-loglik" \
      "$H" bench-loglik --device cuda --model "$work/smollm2-random" --pairs "$work/pairs.json" --warmup 0 \
      --iters 1 || rc=1
  fi
  summarize_ncu
  return $rc
}

# $work/smollm2-random: random weights in SmolLM2-135M's shape (HF directory, f32) with
# SmolLM2's tokenizer (from the kit's metadata GGUF), made once per machine.
smollm2_random() {
  [[ -f $work/smollm2-random/tokenizer.json ]] || python3 - "$work/smollm2-random" "$kit/weights" <<'PY'
import argparse, sys
from pathlib import Path
sys.path.insert(0, "tools")
import torch
from transformers import AutoTokenizer
from bench_decoder_reference import random_model_dir
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
random_model_dir(argparse.Namespace(shape="smollm2", seed=0), torch, out)
AutoTokenizer.from_pretrained(sys.argv[2], gguf_file="smollm2-metadata.gguf").save_pretrained(out)
PY
}

summarize_ncu() { # a text summary beside every report
  local r
  for r in "$R"/ncu-*.ncu-rep; do
    [[ -e $r ]] || continue
    ncu --import "$r" --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
      --section Occupancy --section WarpStateStats --section LaunchStats >"${r%.ncu-rep}.txt" 2>&1
  done
}

step_ncu-t5() {
  [[ -n $emu ]] && { echo "ncu-t5: skipped in an emulator dry run"; return 0; }
  python3 - "$work/t5-random" "$work/t5-pairs.json" <<'PY' || return 1
import json, random, sys
from pathlib import Path
sys.path.insert(0, "tools")
from bench_t5_reference import random_model_dir
out = Path(sys.argv[1])
out.mkdir(exist_ok=True)
random_model_dir("large", 0, out)
random.seed(0)
pairs = [{"ids": [random.randrange(3, 800) for _ in range(420)], "target_start": 400} for _ in range(64)]
json.dump({"pairs": pairs}, open(sys.argv[2], "w"))
PY
  ncu --set full --clock-control none --launch-count 1 -f -k regex:t5_attention -o "$R/ncu-t5" \
    "$H" bench-loglik --device cuda --dtype bf16 --model "$work/t5-random" --pairs "$work/t5-pairs.json" \
    --warmup 0 --iters 1 || return 1
  ncu --import "$R/ncu-t5.ncu-rep" --section SpeedOfLight --section ComputeWorkloadAnalysis \
    --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats \
    >"$R/ncu-t5.txt" 2>&1
}

step_lepus() {
  local rc=0 shape shapes=${LEPUS_SHAPES:-smollm2 gpt2}
  [[ -n $emu ]] && shapes=small # SmolLM2's vocabulary, a two-layer body
  for shape in $shapes; do
    python3 tools/bench_decoder_reference.py --device cuda --shape $shape --pairs $DEC_PAIRS $DEC_PASSAGES \
      --data-dir "$kit/data" --gguf "$kit/weights/smollm2-metadata.gguf" --max-batch-tokens 16384 \
      --iters $((ITERS > 5 ? 5 : ITERS)) --warmup 1 --rounds $ROUNDS --hopscore "$H" --json |
      tee "$R/lepus-$shape.jsonl" || rc=1
  done
  return $rc
}

step_lepus-prefix() {
  local q=$work/q50.parquet rc=0 share flag
  [[ -n $emu ]] && { echo "lepus-prefix: skipped in an emulator dry run (a 135M model)"; return 0; }
  questions 50 "$q" && smollm2_random || return 1
  rm -f "$R/lepus-prefix.txt"
  for share in on off; do
    flag=()
    [[ $share == off ]] && flag=(--min-shared-prefix 0)
    echo "== lepus, shared-prefix reuse $share"
    rm -f "$work/lepus-prefix-$share".*
    "$H" lepus --model "$work/smollm2-random" --input "$q" --output "$work/lepus-prefix-$share.parquet" \
      --device cuda --dtype bf16 --max-batch-tokens 16384 "${flag[@]}" 2>&1 | tail -4 |
      tee -a "$R/lepus-prefix.txt" || rc=1
  done
  compare "shared-prefix reuse on vs off (the same bits expected)" "$work/lepus-prefix-on.parquet" \
    "$work/lepus-prefix-off.parquet" || rc=1
  return $rc
}

step_t5() {
  local rc=0 dt
  for dt in ${HOPSCORE_KIT_T5_DTYPES:-bf16 f32}; do
    python3 tools/bench_t5_reference.py --device cuda --dtype $dt --shape $T5 --questions $T5_Q \
      --max-prompt-tokens $T5_PROMPT --data-dir "$kit/data" --max-batch-tokens 16384 \
      --iters $((ITERS > 5 ? 5 : ITERS)) --warmup $((ITERS > 1 ? 1 : 0)) \
      --threads "$HOPSCORE_THREADS" --hopscore "$H" --json | tee -a "$R/t5.jsonl" || rc=1
  done
  return $rc
}

compare() { # compare LABEL A B
  echo "$1:"
  python3 tools/gpu/compare_outputs.py "$2" "$3" --json | tee -a "$R/${STEP}-compare.jsonl"
}

step_beam() {
  local m=$work/beam-$CK tok=weights/deberta-v3-tokenizer rc=0 t0
  python3 tools/random_checkpoint.py --kind beam --shape $CK -o "$m" || return 1
  questions $NQ "$work/qall.parquet" && questions $NQ_CPU "$work/qcpu.parquet" || return 1
  local run=("$H" beam --model "$m" --tokenizer $tok)
  t0=$(date +%s%N)
  "${run[@]}" --input "$work/qall.parquet" --output "$work/beam-cuda-bf16.parquet" --device cuda --dtype bf16 || rc=1
  echo "{\"beam_cuda_bf16_questions\": $NQ, \"seconds\": $((($(date +%s%N) - t0) / 1000000))e-3}" | tee "$R/beam-time.jsonl"
  "${run[@]}" --input "$work/qcpu.parquet" --output "$work/beam-cuda-f32.parquet" --device cuda --dtype f32 || rc=1
  "${run[@]}" --input "$work/qcpu.parquet" --output "$work/beam-cpu.parquet" || rc=1
  python3 - "$work" <<'PY' || rc=1
import sys, pyarrow.parquet as pq
w = sys.argv[1]
t = pq.read_table(f"{w}/beam-cuda-bf16.parquet")
ids = set(pq.read_table(f"{w}/beam-cpu.parquet").column("id").to_pylist())
pq.write_table(t.filter([i in ids for i in t.column("id").to_pylist()]), f"{w}/beam-cuda-bf16-cpu-ids.parquet")
PY
  compare "cpu f32 vs cuda f32" "$work/beam-cpu.parquet" "$work/beam-cuda-f32.parquet" || rc=1
  compare "cpu f32 vs cuda bf16" "$work/beam-cpu.parquet" "$work/beam-cuda-bf16-cpu-ids.parquet" || rc=1
  return $rc
}

step_label() {
  local tok=weights/deberta-v3-tokenizer rc=0 k
  for k in labeler filter; do
    python3 tools/random_checkpoint.py --kind $k --shape $CK -o "$work/$k-$CK" || return 1
  done
  questions $NQ_CPU "$work/qcpu.parquet" || return 1
  local run=("$H" label --labeler "$work/labeler-$CK" --filter "$work/filter-$CK" --tokenizer $tok --input "$work/qcpu.parquet")
  "${run[@]}" --output "$work/label-cpu.parquet" || rc=1
  "${run[@]}" --output "$work/label-cuda-f32.parquet" --device cuda --dtype f32 || rc=1
  "${run[@]}" --output "$work/label-cuda-bf16.parquet" --device cuda --dtype bf16 || rc=1
  compare "cpu f32 vs cuda f32" "$work/label-cpu.parquet" "$work/label-cuda-f32.parquet" || rc=1
  compare "cpu f32 vs cuda bf16" "$work/label-cpu.parquet" "$work/label-cuda-bf16.parquet" || rc=1
  return $rc
}

step_embed() {
  local rc=0 m dt corpus=$kit/data/hotpot600-corpus.parquet files=$kit/weights/minilm-files
  python3 tools/random_bert.py --shape minilm --files "$files" --sentence-transformers -o "$work/minilm-random" &&
    python3 tools/random_bert.py --shape base --files "$files" -o "$work/contriever-random" || return 1
  for m in minilm-random:bf16 contriever-random:bf16 minilm-random:f32; do
    python3 tools/bench_embed_reference.py --corpus "$corpus" --model "$work/${m%%:*}" --hopscore "$H" \
      --device cuda --dtype ${m##*:} --threads 16 --repeat $EMBED_REPEAT --batch-size 256 \
      --max-batch-tokens 65536 --json | tee -a "$R/embed.jsonl" || rc=1
  done
  # Dense retrieval on the device (f32 scores) against the CPU: the same pools.
  local q=$work/q600.parquet idx=$work/index.parquet
  questions $NQ "$q" || return 1
  "$H" embed --model "$work/minilm-random" --input "$corpus" --output "$idx" --device cuda --dtype f32 \
    --max-batch-tokens 65536 || rc=1
  for dev in cuda cpu; do
    "$H" retrieve --questions "$q" --corpus "$corpus" --index "$idx" --encoder "$work/minilm-random" \
      --device $dev --dtype f32 --k 20 --output "$work/retrieved-$dev.parquet" 2>&1 | tail -2 || rc=1
  done
  compare "retrieve cpu vs cuda f32" "$work/retrieved-cpu.retrieval.parquet" "$work/retrieved-cuda.retrieval.parquet" || rc=1
  return $rc
}

step_rerank() {
  local rc=0 dt
  for dt in bf16 f32; do
    python3 tools/bench_rerank_reference.py --hopscore "$H" --device cuda --dtype $dt --engines hopscore,st \
      --shapes "$RERANK_SHAPES" \
      --tokenizer-dir "$kit/weights/minilm-files" --threads 16 --repeat $RERANK_REPEAT --batch-size 128 \
      --rounds "$ROUNDS" --keep "$work/rerank" --json | tee -a "$R/rerank.jsonl" || rc=1
  done
  return $rc
}

# variant_rounds NAME VARIANT... -- BENCH_ARGS...: 3 interleaved rounds of `bench` with
# each VARIANT (`label`, `label:VAR=value[,VAR2=value]` for environment variables,
# `label:--flag`), each run bounded at $VARIANT_TIMEOUT s (600; `next` sets 60),
# rows in NAME.jsonl, medians per variant in NAME.txt (the first variant against the second).
variant_rounds() {
  local name=$1 rc=0 round v; shift
  local variants=()
  while [[ $1 != -- ]]; do variants+=("$1"); shift; done
  shift
  rm -f "$R/$name.jsonl"
  for round in 1 2 3; do
    for v in "${variants[@]}"; do
      local label=${v%%:*} extra=${v#*:} env=() flag=()
      [[ $extra == "$v" ]] && extra=
      [[ $extra == --* ]] && flag=("$extra")
      [[ $extra == *=* && $extra != --* ]] && IFS=, read -ra env <<<"$extra"
      env "${env[@]}" timeout -k 5 ${VARIANT_TIMEOUT:-600} "$H" bench --device cuda "$@" "${flag[@]}" --json |
        sed "s/^{/{\"variant\": \"$label\", \"round\": $round, /" | tee -a "$R/$name.jsonl" || rc=1
    done
  done
  python3 - "$R/$name.jsonl" "${variants[@]%%:*}" <<'PY' | tee "$R/$name.txt" || rc=1
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
labels = [v for v in sys.argv[2:] if any(r["variant"] == v for r in rows)]
med = {v: statistics.median(r["seconds_per_batch"] for r in rows if r["variant"] == v) for v in labels}
r = rows[0]
print(f"{r['shape']}, L = {r['seq_len']}, batch {r['batch']} (medians of 3, ms per batch): "
      + ", ".join(f"{v} {t*1e3:.3f}" for v, t in med.items())
      + (f"; {labels[0]} / {labels[1]} {med[labels[0]]/med[labels[1]]:.3f}" if len(labels) > 1 else ""))
PY
  return $rc
}

step_gelu() {
  variant_rounds gelu fused:HOPSCORE_FUSED_GELU=on unfused:HOPSCORE_FUSED_GELU=off tanh:--tanh-gelu -- \
    --dtype bf16 --shape $LARGE --seq-len ${LENS_LARGE%%,*} --iters $ITERS "${SMALL[@]}"
}

step_gate() {
  [[ -n $emu ]] && { echo "gate: skipped in an emulator dry run (a 135M model)"; return 0; }
  variant_rounds gate fused:HOPSCORE_FUSED_GATE=on unfused:HOPSCORE_FUSED_GATE=off -- \
    --dtype bf16 --shape smollm2 --seq-len 512 --batch 64 --iters $ITERS
}

step_addnorm() {
  variant_rounds addnorm fused:HOPSCORE_FUSED_NORM=on unfused:HOPSCORE_FUSED_NORM=off -- \
    --dtype bf16 --shape $LARGE --seq-len ${LENS_LARGE%%,*} --iters $ITERS "${SMALL[@]}"
}

step_invariance() {
  local rc=0 round bi shape=(--shape $LARGE --dtype bf16 --iters $ITERS --peak-gemm 0)
  local small=(--seq-len 128 --batch 8)
  [[ -n $emu ]] && shape=(--shape $LARGE --dtype bf16 --iters $ITERS) small=(--seq-len 16 --batch 2 --peak-gemm 0)
  rm -f "$R/invariance.jsonl"
  for round in 1 2 3; do
    for bi in on off; do
      timeout -k 5 ${VARIANT_TIMEOUT:-600} "$H" bench --device cuda "${shape[@]}" --seq-len ${LENS_LARGE%%,*} \
        "${SMALL[@]}" --batch-invariant $bi --json |
        sed "s/^{/{\"case\": \"full batch\", \"batch_invariant\": \"$bi\", \"round\": $round, /" |
        tee -a "$R/invariance.jsonl" || rc=1
      timeout -k 5 ${VARIANT_TIMEOUT:-600} "$H" bench --device cuda "${shape[@]}" "${small[@]}" \
        --batch-invariant $bi --json |
        sed "s/^{/{\"case\": \"small batch\", \"batch_invariant\": \"$bi\", \"round\": $round, /" |
        tee -a "$R/invariance.jsonl" || rc=1
    done
  done
  python3 - "$R/invariance.jsonl" <<'PY' | tee "$R/invariance.txt" || rc=1
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for case in ("full batch", "small batch"):
    med = {}
    for bi in ("on", "off"):
        xs = [r["seconds_per_batch"] for r in rows if r["case"] == case and r["batch_invariant"] == bi]
        med[bi] = statistics.median(xs) if xs else float("nan")
    r = next(r for r in rows if r["case"] == case)
    print(f"{case} ({r['shape']}, L = {r['seq_len']}, batch {r['batch']}): pinned {med['on']*1e3:.3f} ms, "
          f"per shape {med['off']*1e3:.3f} ms per batch (medians of 3): cost {100*(med['on']/med['off']-1):+.2f} %")
PY
  return $rc
}

step_sanitize() {
  local rc=0 cs=(compute-sanitizer --print-limit 20 --error-exitcode 3)
  [[ -n $emu ]] && { echo "sanitize: skipped in an emulator dry run"; return 0; }
  "${cs[@]}" --tool memcheck "$kit/bin/gpu_parity" ops_bf16 --nocapture || rc=1
  # racecheck is slow: only the kernels that share memory between warps.
  HOPSCORE_PARITY_ONLY=attention,loglik "${cs[@]}" --tool racecheck "$kit/bin/gpu_parity" ops_bf16 --nocapture || rc=1
  # The warp-specialised Hopper kernels (TMA, mbarrier, setmaxnreg): both tools.
  for tool in memcheck racecheck; do
    "${cs[@]}" --tool $tool "$kit/bin/gpu_parity" disentangled_attention_v5_bf16 tma_check_bf16 --nocapture || rc=1
  done
  return $rc
}

# The self-test's verdicts live here for every step of the call (HOPSCORE_CACHE).
export HOPSCORE_CACHE=$work/cache

step_doctor() {
  local rc=0 dtype
  for dtype in bf16 f16 f32; do
    "$H" doctor --device cuda --dtype $dtype --gpu-kernels latest --timeout 20 | tee -a "$R/doctor.txt" || rc=1
  done
  if grep -qE '^(fail|hang|error) ' "$R/doctor.txt"; then
    echo "doctor: not every kernel passed; the later steps run --gpu-kernels proven:" |
      tee -a "$OUT/summary.txt" "$work/proven-only"
    grep -E '^(fail|hang|error) ' "$R/doctor.txt" | tee -a "$OUT/summary.txt"
  fi
  return $rc
}

step_parity-each() {
  local t rc=0 tests
  # The proven path's tests first: a hang later costs only its own 30 s.
  tests=$("$kit/bin/gpu_parity" --list 2>/dev/null | sed -n 's/: test$//p' |
    awk '/^ops::(ops_|older_kernels_)/ {print 0, $0; next} {print 1, $0}' | sort -s -k1,1 | cut -d' ' -f2)
  [[ -n $emu ]] && tests=$(grep -E '^(ops::ops_f32|ops::older_kernels_bf16|models::deberta_models_f32)$' <<<"$tests")
  # Seconds a test may take (a whole-model test takes ≈ 50 s on the emulator).
  local PARITY_TIMEOUT=30
  [[ -n $emu ]] && PARITY_TIMEOUT=90
  HOPSCORE_REQUIRE_GPU=1 timeout -k 5 30 "$kit/bin/cuda_probe" >>"$R/parity.txt" 2>&1 || rc=1
  for t in $tests; do
    HOPSCORE_REQUIRE_GPU=1 timeout -k 5 $PARITY_TIMEOUT "$kit/bin/gpu_parity" --exact "$t" --nocapture --test-threads=1 \
      >"$work/parity-one.txt" 2>&1
    case $? in 0) echo "PASS $t" ;; 124 | 137) echo "HANG $t"; rc=1 ;; *) echo "FAIL $t"; rc=1 ;; esac |
      tee -a "$R/parity.txt"
    grep -E "rel err|panicked|FAIL" "$work/parity-one.txt" >>"$R/parity.txt"
  done
  grep -qE '^(FAIL|HANG) ' "$R/parity.txt" && rc=1
  return $rc
}

step_records() {
  local card cc date run
  [[ -f $work/proven-only ]] && { echo "records: the doctor step found a failing kernel: none written"; return 1; }
  [[ -f $R/parity.txt ]] && ! grep -qE '^(FAIL|HANG) ' "$R/parity.txt" && grep -q '^PASS ' "$R/parity.txt" ||
    { echo "records: parity-each did not pass every test: none written"; return 1; }
  card=$HOPSCORE_KIT_CARD cc=9.0
  [[ -n $emu ]] || cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1)
  date=$(date -u +%F) run="docs/gpu-runs/$date-$(tr ' ' '-' <<<"${card,,}")"
  # The SASS this card loads: sm_XY, and sm_XYa for the arch-specific files.
  "$H" doctor --kernels | awk -F'\t' -v a="sm_${cc/./}" -v card="$card" -v date="$date" -v kit="$commit" -v run="$run" \
    '$2 == a || $2 == a "a" {print $1 "\t" $2 "\t" $3 "\t" card "\t" date "\t" kit "\t" run}' >"$R/proven-new.tsv"
  echo "records: $(wc -l <"$R/proven-new.tsv") rows for $card (sm_${cc/./}) in proven-new.tsv: append them to kernels/proven.tsv"
}

step_kernels() {
  local latest=HOPSCORE_GPU_KERNELS=latest
  [[ -f $work/proven-only ]] && latest=HOPSCORE_GPU_KERNELS=proven
  variant_rounds kernels proven:HOPSCORE_GPU_KERNELS=proven latest:$latest \
    v5:${latest},HOPSCORE_ATTENTION=v5 -- --dtype bf16 --shape $LARGE --seq-len ${LENS_LARGE%%,*} --iters $ITERS "${SMALL[@]}"
}

pack_results() {
  cp "$OUT/summary.txt" "$R/" 2>/dev/null
  tar -C "$R" -czf "$OUT/results.tar.gz.tmp" . && mv "$OUT/results.tar.gz.tmp" "$OUT/results.tar.gz"
}

if [[ ${1:-} == --one ]]; then # one step, in its own process (run under timeout)
  setup quick >/dev/null || exit 1
  # The doctor step found a kernel that does not pass: every later job keeps to the
  # proven kernels (the cached verdicts keep the failing one out as well).
  [[ -f $work/proven-only ]] && export HOPSCORE_GPU_KERNELS=proven
  STEP=$2 "step_$2"
  exit
fi

if [[ ${1:-} == next ]]; then
  set -- "${NEXT[@]}"
  total=0
  for arg in "$@"; do total=$((total + ${arg#*:})); done
  ((total <= 570)) || { echo "next: budgets add up to $total s, over 570"; exit 2; }
  planned=1 # its budgets are the plan: no warning that they are under a step's default
  export VARIANT_TIMEOUT=60 HOPSCORE_KIT_TRITON=off LEPUS_SHAPES=smollm2
  export HOPSCORE_KIT_LENS=${HOPSCORE_KIT_LENS:-512} # read again by each step's process
fi
t_setup=$(date +%s)
setup || { pack_results; exit 1; }
ATTENTION=${HOPSCORE_KIT_ATTENTION:-v3}
HOPSCORE_KIT_GRAPHS=${HOPSCORE_KIT_GRAPHS:-on}
export ATTENTION LARGE BASE LENS_LARGE LENS_BASE DEC_PAIRS DEC_PASSAGES NQ NQ_CPU CK ITERS EMBED_REPEAT RERANK_REPEAT RERANK_SHAPES T5 T5_Q T5_PROMPT ROUNDS
export HOPSCORE_KIT_GRAPHS
echo "setup ok in $(($(date +%s) - t_setup)) s; attention kernels: $ATTENTION" | tee -a "$OUT/summary.txt"
status=0
for arg in "$@"; do
  s=${arg%%:*}
  budget=${BUDGET[$s]:-}
  if [[ $arg == *:* ]]; then
    budget=${arg#*:}
    [[ -z ${planned:-} ]] && ((budget < ${BUDGET[$s]:-0})) &&
      echo "$s: budget $budget s is under the step's default ${BUDGET[$s]} s: it may not finish" |
      tee -a "$OUT/summary.txt"
  fi
  if ! declare -F "step_$s" >/dev/null; then
    echo "unknown step $s (${!BUDGET[*]})" | tee -a "$OUT/summary.txt"; status=2; continue
  fi
  t0=$(date +%s)
  timeout -k 10 "$budget" bash "$0" --one "$s" >"$R/$s.log" 2>&1
  rc=$?
  case $rc in 0) r=ok ;; 124 | 137) r="TIMED OUT (budget $budget s)" ;; *) r="FAILED (exit $rc)" ;; esac
  [[ $rc == 0 ]] || status=1
  echo "$s: $r in $(($(date +%s) - t0)) s" | tee -a "$OUT/summary.txt"
  tail -n 30 "$R/$s.log" | cut -c1-300
  pack_results
done
# Every row names the card it ran on (or the CPU for the peers that ran there).
python3 tools/gpu/check_rows.py "$R" --card "$HOPSCORE_KIT_CARD" | tee -a "$OUT/summary.txt" | tail -5 ||
  status=1
pack_results
exit $status
