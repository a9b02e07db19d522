#!/usr/bin/env bash
# Prints the path of nvcc 13.0, installing the CUDA 13.0 compiler wheels from PyPI into
# a venv first when they are not there yet (no GPU or CUDA install needed; the GPU
# machines run driver 580, which rejects newer PTX), with CUTLASS 4.2's headers (the
# nvidia-cutlass wheel, where build.rs looks for them: kernels/cutlass/). `--tools` also installs cuobjdump
# and nvdisasm 13.2.51 (the oldest on PyPI; they read 13.0 cubins) for the SASS report.
#
#   export NVCC=$(bash tools/nvcc.sh)
#
# The venv is $HOPSCORE_CI_VENV, default target/ci-venv.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${HOPSCORE_CI_VENV:-$PWD/target/ci-venv}"
BIN="$VENV/lib/python3.11/site-packages/nvidia/cu13/bin"
pip_install() {
  [ -x "$VENV/bin/pip" ] || python3 -m venv "$VENV" >&2
  "$VENV/bin/pip" install --quiet --disable-pip-version-check "$@" >&2
}
if [ ! -x "$BIN/nvcc" ]; then
  pip_install nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 \
    nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85
fi
if [ ! -f "$VENV/lib/python3.11/site-packages/cutlass_library/source/include/cutlass/cutlass.h" ]; then
  pip_install nvidia-cutlass==4.2.0.0
fi
if [ "${1:-}" = "--tools" ] && [ ! -x "$BIN/cuobjdump" ]; then
  pip_install nvidia-cuda-cuobjdump==13.2.51 nvidia-cuda-nvdisasm==13.2.51
fi
echo "$BIN/nvcc"
