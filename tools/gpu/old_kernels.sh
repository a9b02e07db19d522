#!/usr/bin/env bash
# Compiles the kernels/*.cu of commit COMMIT into DIR/<op>.fatbin with the flags build.rs
# uses (sm_80 + sm_90 SASS or the file's `// hopscore-sass:` list, compute_80 PTX), so
# that tools/gpu/sass_hashes.py can hash what a kit built at that commit ran:
#
#   NVCC=$(bash tools/nvcc.sh) bash tools/gpu/old_kernels.sh d6c9117 /tmp/k-d6c9117
#
# The CUTLASS GEMMs (kernels/cutlass/) are left out: none has run on hardware yet.
set -euo pipefail
commit="$1" out="$2"
: "${NVCC:?set NVCC (bash tools/nvcc.sh prints it)}"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
git archive "$commit" kernels | tar -x -C "$tree"
mkdir -p "$out"
for src in "$tree"/kernels/*.cu; do
  stem="$(basename "$src" .cu)"
  archs="$(sed -n 's|^// hopscore-sass: *||p' "$src" | tr -d ' ' | tr ',' ' ')"
  gencode=()
  for sm in ${archs:-sm_80 sm_90}; do gencode+=("-gencode=arch=compute_${sm#sm_},code=$sm"); done
  (cd "$tree" && "$NVCC" -fatbin --no-compress -O3 -std=c++17 -Ikernels "${gencode[@]}" \
    -gencode=arch=compute_80,code=compute_80 "kernels/$stem.cu" -o "$out/$stem.fatbin")
  echo "$stem"
done
