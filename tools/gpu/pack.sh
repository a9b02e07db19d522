#!/usr/bin/env bash
# Prepares a real-GPU session on this (CPU) machine: builds hopscore and the GPU test
# executables with the CUDA kernels, strips them, and packs them with the inputs the
# GPU steps need into device-carry/ (ignored by git), to be carried to the GPU machine
# and used by tools/gpu/run.sh. See tools/gpu/README.md.
#
#   NVCC=/path/to/nvcc bash tools/gpu/pack.sh
#
# Needs: nvcc (CUDA 13.0, see .ci/run), $PYTHON (default python3) with pyarrow, the
# DeBERTa-v3 tokenizer, all-MiniLM-L6-v2 and SmolLM2
# (tools/fetch_tokenizer.sh, tools/fetch_minilm.sh, tools/fetch_smollm2.sh), the HotpotQA dev sample in
# the dev samples in data/ (or $HOPSCORE_DATA), and pip (for the reference kernels' wheels).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
data=${HOPSCORE_DATA:-$root/data}
hotpot=$data/hotpot_dev_distractor_sample600.json.gz
[[ -f $hotpot ]] || { echo "pack.sh: $hotpot missing (set HOPSCORE_DATA)" >&2; exit 1; }
[[ -f weights/deberta-v3-tokenizer/tokenizer.json ]] || bash tools/fetch_tokenizer.sh
[[ -f weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf ]] || bash tools/fetch_smollm2.sh
[[ -f weights/all-minilm-l6-v2/tokenizer.json ]] || bash tools/fetch_minilm.sh

export HOPSCORE_REQUIRE_NVCC=1
cargo build --release --features cuda --bin hopscore
# The test executables that exercise the GPU (their names from cargo's JSON messages).
mapfile -t tests < <(cargo test --release --features cuda --no-run --message-format=json \
    --test gpu_parity --test cuda_probe \
  | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["target"]["name"], m["executable"])')

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/data" "$stage/weights/deberta-v3-tokenizer" "$stage/wheels" \
  "$stage/weights/minilm-files/1_Pooling"
strip -o "$stage/bin/hopscore" target/release/hopscore
for t in "${tests[@]}"; do
  set -- $t
  strip -o "$stage/bin/$1" "$2"
done
cp "$hotpot" "$stage/data/"
# The embed step: the HotpotQA sample's passages as a corpus, and MiniLM's small files
# (tokenizer, sentence-transformers modules) for the random BERTs made there.
target/release/hopscore import hotpotqa "$hotpot" --output "$stage/q600.parquet" 2>/dev/null
"${PYTHON:-python3}" tools/questions_to_corpus.py "$stage/q600.parquet" "$stage/data/hotpot600-corpus.parquet"
rm -f "$stage"/q600*.parquet
for f in tokenizer.json modules.json sentence_bert_config.json 1_Pooling/config.json; do
  cp "weights/all-minilm-l6-v2/$f" "$stage/weights/minilm-files/$f"
done
cp weights/deberta-v3-tokenizer/{tokenizer.json,spm.model} "$stage/weights/deberta-v3-tokenizer/"
python3 tools/gpu/gguf_metadata.py weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
  "$stage/weights/smollm2-metadata.gguf"
# Pure-Python wheels the GPU image lacks: gguf (transformers' GGUF tokenizer) and the
# Triton DeBERTa kernels that tools/bench_reference.py compares against.
python3 -m pip download -q --no-deps --only-binary=:all: -d "$stage/wheels" \
  gguf==0.19.0 disentangled-flash==1.1.1 flashdeberta==0.0.8
{
  echo "manifest_dir=$root"
  echo "commit=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src kernels build.rs Cargo.toml || echo -dirty)"
  echo "built=$(date -u +%FT%TZ)"
} >"$stage/kit.env"

mkdir -p device-carry
tar -C "$stage" -cf - . | xz -T0 -6 >device-carry/kit.tar.xz
ls -l device-carry/kit.tar.xz
echo "carry device-carry; run: bash tools/gpu/run.sh STEP... (tools/gpu/README.md)"
