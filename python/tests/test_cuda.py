"""The CUDA path of the wheel without a GPU: with no driver, ``device="cuda"`` raises the
CLI's message; with the CPU emulator of the CUDA driver (tools/cuda_emu) as libcuda and
its cuBLAS laid out as the ``nvidia-cublas`` wheel lays it out (``nvidia/cu13/lib``),
``import hopscore`` preloads that cuBLAS, with no ``LD_LIBRARY_PATH`` pointing at it,
and the cross-encoder on the (emulated) device gives the CPU's logits."""

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import hopscore
from conftest import REPO, fixture

EMU = REPO / "target" / "cuda-emu"

CHILD = """
import json, sys
import pyarrow.parquet as pq
import hopscore, hopscore._cuda
loaded = hopscore._cuda.preload()
job = hopscore.CrossEncoder(sys.argv[1], tokenizer=sys.argv[2], device=sys.argv[3], dtype="f32")
rows = job.classify(pq.read_table(sys.argv[4])).rows
print(json.dumps({"loaded": loaded, "logits": rows.column("logits").to_pylist()}))
"""


def driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def test_cuda_without_a_driver_raises_the_clis_message(word_tokenizer):
    if driver_present():
        pytest.skip("a CUDA driver is installed here")
    with pytest.raises(RuntimeError, match=r"no CUDA driver \(libcuda.so\) found.*--device cpu"):
        hopscore.CrossEncoder(fixture("deberta/v3_seqcls"), tokenizer=word_tokenizer, device="cuda")


def run_child(device: str, env: dict, pairs: Path, tokenizer: str) -> dict:
    argv = [sys.executable, "-c", CHILD, fixture("deberta/v3_seqcls"), tokenizer, device, str(pairs)]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_wheel_layout_cublas_is_preloaded_and_the_emulated_gpu_matches_the_cpu(tmp_path, pairs, word_tokenizer):
    if not (EMU / "libcuda.so.1").is_file():
        if os.environ.get("HOPSCORE_ALLOW_SKIP") == "1":
            pytest.skip(f"{EMU} is missing: run tools/cuda_emu/build.sh")
        pytest.fail(f"{EMU} is missing: run tools/cuda_emu/build.sh first (HOPSCORE_ALLOW_SKIP=1 skips)")
    driver = tmp_path / "driver"
    wheel_lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    driver.mkdir()
    wheel_lib.mkdir(parents=True)
    (driver / "libcuda.so.1").symlink_to(EMU / "libcuda.so.1")
    for name in ("libcublasLt.so.13", "libcublas.so.13"):
        (wheel_lib / name).symlink_to(EMU / name)
    env = dict(os.environ, LD_LIBRARY_PATH=str(driver), PYTHONPATH=str(tmp_path / "site"))

    cpu = run_child("cpu", env, pairs, word_tokenizer)
    gpu = run_child("cuda", env, pairs, word_tokenizer)

    assert gpu["loaded"] == [str(wheel_lib / "libcublasLt.so.13"), str(wheel_lib / "libcublas.so.13")]
    assert len(gpu["logits"]) == len(cpu["logits"]) == 3
    for g, c in zip(gpu["logits"], cpu["logits"]):
        assert g == pytest.approx(c, abs=1e-4)
