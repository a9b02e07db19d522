#!/usr/bin/env bash
# Tests of the Python package on the wheel as users get it: builds the wheel with
# maturin (python/, cuda feature, reusing target/), installs it into a fresh venv with
# pinned pytest, pyarrow and Ray, and runs python/tests. Needs the weights of the
# README's test command (tools/fetch_tokenizer.sh). The wheel is built with the CUDA
# kernels ($NVCC, else nvcc 13.0 from PyPI through tools/nvcc.sh) and the CUDA test runs
# them on the CPU emulator of the driver (built here when target/cuda-emu lacks it).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ -z "${NVCC:-}" ]; then
  NVCC="$(bash tools/nvcc.sh)"
  export NVCC
fi
export HOPSCORE_REQUIRE_NVCC=1
[ -f target/cuda-emu/libcuda.so.1 ] || bash tools/cuda_emu/build.sh

BUILD_VENV="$PWD/target/py-build-venv"
TEST_VENV="$PWD/target/py-test-venv"
WHEELS="$PWD/target/wheels"

if [ ! -x "$BUILD_VENV/bin/maturin" ]; then
  python3 -m venv "$BUILD_VENV"
  "$BUILD_VENV/bin/pip" install --quiet --disable-pip-version-check maturin==1.16.0
fi
rm -rf "$WHEELS"
(cd python && "$BUILD_VENV/bin/maturin" build --release --quiet -o "$WHEELS")
wheel=$(ls "$WHEELS"/hopscore-*.whl)
echo "wheel: $(basename "$wheel") ($(du -h "$wheel" | cut -f1))"

rm -rf "$TEST_VENV"
python3 -m venv "$TEST_VENV"
"$TEST_VENV/bin/pip" install --quiet --disable-pip-version-check "$wheel" \
  pyarrow==26.0.1 pytest==9.0.2 'ray[data]==2.60.0'
# The installed package, never python/hopscore: run from the root with bin/pytest.
"$TEST_VENV/bin/pytest" -q -p no:cacheprovider python/tests
