#!/usr/bin/env python3
"""Throughput of PyTorch DeBERTa-v3 encoders (the references), optionally against hopscore.

CPU mode (the default; unchanged): ``transformers.DebertaV2Model`` with random weights in
a DeBERTa-v3 shape, fp32, eval mode, under ``torch.inference_mode()``, on CPU; prints
tokens/s. GPU mode (``--device cuda``): the same model and inputs through several
engines — HF transformers eager, HF SDPA (where transformers supports it for
DebertaV2), and the PyPI kernels ``disentangled-flash`` and ``flashdeberta`` — in
bf16 (default), each checked against an f32 reference, and hopscore's own CUDA
benchmark in the same run, with ratios.

Exact commands (from the repository root):

    # reference only, deberta-v3-base shape, batch 8 x 256 tokens, all cores
    HF_HUB_OFFLINE=1 python3 tools/bench_reference.py

    # reference vs hopscore (release build), same threads/shape/batch/length/iters
    cargo build --release
    HF_HUB_OFFLINE=1 python3 tools/bench_reference.py \\
        --hopscore target/release/hopscore --threads 2

    # quick check (hidden 256, 4 layers)
    HF_HUB_OFFLINE=1 python3 tools/bench_reference.py --shape small --iters 2

    # GPU (H100/H200): deberta-v3-large at L = 256 and 512, bf16, all engines + hopscore
    cargo build --release --features cuda
    python3 tools/bench_reference.py --device cuda --shape deberta-v3-large \\
        --seq-lens 256,512 --hopscore target/release/hopscore

Flags: ``--shape {small,deberta-v3-base,deberta-v3-large}`` (default deberta-v3-base),
``--device {cpu,cuda}`` (cpu), ``--gpu N`` (0), ``--dtype {f32,bf16,f16}`` (f32 on cpu,
bf16 on cuda), ``--engines`` (comma list; hf-eager on cpu,
hf-eager,hf-sdpa,disentangled-flash,flashdeberta on cuda; disentangled-flash-torch is
also known), ``--batch`` (8 on cpu; 65536 // seq_len on cuda, as hopscore bench),
``--seq-len`` (256) or ``--seq-lens 256,512`` (several lengths in one run),
``--iters`` (timed; 3 on cpu, 10 on cuda) after ``--warmup`` (1 on cpu, 3 on cuda),
``--threads`` (default: all cores), ``--seed`` (0), ``--hopscore BIN``, ``--no-check``
(skip the f32 reference comparison), ``--json`` (one JSON line per (engine, seq_len)
instead of the table).

Engines (every one gets the SAME weights: one seeded f32 ``DebertaV2Model`` is built on
the CPU and its state_dict is loaded into each engine's model, built on the device and
cast to ``--dtype``; every one runs the SAME input ids):

    hf-eager                  transformers DebertaV2Model, attn_implementation "eager"
    hf-compile                hf-eager under torch.compile (inductor, static shapes: one
                              graph per length, compiled in the warm-up passes)
    hf-sdpa                   DebertaV2Model._from_config(config, attn_implementation="sdpa").
                              transformers 5.23 refuses it (DebertaV2 has no
                              _supports_sdpa): "DebertaV2Model does
                              not support an attention implementation through
                              torch.nn.functional.scaled_dot_product_attention yet" — the row
                              then shows that reason. Should a later version accept it, the
                              row checks that config._attn_implementation really is "sdpa".
    disentangled-flash        PyPI disentangled-flash 1.1.1 (import disentangled_flash; Triton).
                              ``optimize_deberta(model, backend="triton",
                              sequence_lengths=[...])`` on the HF backbone replaces
                              model.encoder by DebertaV2OptimizedEncoder (the HF layers are
                              kept; each layer's attention.self becomes its fused-QKV
                              InferenceDisentangledSelfAttention with prepared position
                              tables per length). Needs eval mode, no_grad/inference_mode,
                              CUDA, head dim 32/64/128, f16/bf16/f32; before each length,
                              ``model.encoder.activate_shape(L)``. Careful: when Triton is
                              missing it silently keeps the HF encoder — the row checks
                              ``model.encoder.backend == "triton"`` and says so otherwise.
                              Tuning: its bundled H200 (sm90) profile when it matches,
                              else its heuristic.
    disentangled-flash-torch  the same package with backend="torch" (its optimised
                              PyTorch attention; runs on the CPU too).
    flashdeberta              PyPI flashdeberta 0.0.8 (import flashdeberta; Triton).
                              ``flashdeberta.FlashDebertaV2Model(config)`` is a separate
                              model class (DebertaV2Model layout, same state_dict keys;
                              every layer's attention.self is FlashDisentangledSelfAttention
                              calling its Triton flash kernel with c2p/p2c); it accepts
                              transformers' DebertaV2Config. Its kernels need CUDA (f16/bf16
                              are what it is built for); tiles via
                              FLASHDEBERTA_FWD_{BLOCK_M,BLOCK_N,NUM_STAGES,NUM_WARPS}.

Making the two PyPI packages available on a GPU machine without network (both are
pure-Python ``py3-none-any`` wheels; on a machine with network):

    pip download --no-deps disentangled-flash==1.1.1 flashdeberta==0.0.8 einops -d target/wheels

carry ``target/wheels`` (about 0.2 MB) and there, before the benchmark:

    python3 -m pip install -q --no-index --no-deps --target /tmp/site target/wheels/*.whl
    export PYTHONPATH=/tmp/site

(or ``pip install --no-index --find-links target/wheels disentangled-flash flashdeberta``
where the deps below are installed). Their METADATA: disentangled-flash needs
torch>=2.7 only (transformers>=4.57 is the "hf" extra) and imports ``triton`` itself
(not listed; Linux CUDA builds of torch depend on triton); flashdeberta needs
torch>=2.1, transformers>=4.30, triton>=3.0 and einops>=0.7. A standard Linux
PyTorch 2.11 (+ triton 3.6) + transformers 5.17 install lacks only einops (the GPU
machines' image has einops too). Both import without a GPU when triton is installed;
flashdeberta's forward and disentangled-flash's Triton path then fail (CUDA only), its
``backend="torch"`` path runs.

With ``--hopscore BIN`` it runs, per length::

    BIN bench --device cpu --shape SHAPE --seq-len L --batch B --iters I --threads N --json
    BIN bench --device cuda --gpu G --dtype D --shape SHAPE --seq-len L --batch B \\
        --warmup W --iters I --json                                   (with --device cuda)

and reads the JSON line it prints (tokens_per_s; on cuda also gflops,
gemm_peak_tflops, peak_share, kernels[{kernel, calls, ms}]). hopscore draws its own
random weights and ids (same shape, batch and length). The table gives every engine,
its TFLOP/s (same FLOP count as hopscore's bench: GEMMs and attention products), the
ratio to the first engine and the ratio hopscore / engine (> 1 means hopscore is
faster), then hopscore's share of its measured GEMM peak and its top-5 kernels by
time. On the CPU, RAYON_NUM_THREADS / OMP_NUM_THREADS are also set to N for the child;
if the binary does not know ``--threads`` yet, the call is retried without it (the
environment variables then carry the thread count) and a warning says so. A failed
hopscore run is a row with its reason and makes the exit status 1.

Shapes (random weights; vocab 128100, max_position_embeddings 512,
relative_attention, position_buckets 256, pos_att_type p2c|c2p, share_att_key,
norm_rel_ebd layer_norm, no absolute positions, type_vocab_size 0):

    small             hidden 256,  4 layers,  4 heads, intermediate 1024
    deberta-v3-base   hidden 768, 12 layers, 12 heads, intermediate 3072
    deberta-v3-large  hidden 1024, 24 layers, 16 heads, intermediate 4096

Inputs: ``batch`` rows of ``seq-len`` random ids in [3, vocab) drawn with a fixed
seed, [CLS]=1 first and [SEP]=2 last, full attention mask (no padding), as
hopscore's bench does. Weights are drawn with N(0, 0.02) (HF's default init).
Timing: wall clock (time.perf_counter) per timed iteration, with
``torch.cuda.synchronize()`` after the warm-up and after every iteration on cuda;
mean per batch, and with ``--rounds N`` the median of N such rounds (each round's figure
in ``rounds_seconds_per_batch``; hopscore's row is its median run's, peak and kernel
split included). An engine that cannot run (package missing, not
supported, out of memory, any error) is a row with the reason, never a crash.

Check: the first sequence's last_hidden_state of every engine, cast to f32, against
the f32 reference (HF eager, f32, CPU, that sequence alone): max abs difference.
``MISMATCH`` marks a difference above max(4 x hf-eager's own difference at that
length, TOL[dtype]) with TOL f32 1e-3, f16 5e-2, bf16 2e-1.

``--device cuda`` without a usable CUDA device prints "no CUDA device" and exits 2.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "goldens"))
from common import DEBERTA_V3_ATTENTION  # noqa: E402  (tools/goldens/common.py, standard library only)
from bench_device import hopscore_label, torch_label  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHAPES = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "deberta-v3-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "deberta-v3-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}
# A microsoft/deberta-v3-* config: the v3 attention settings of the golden generators
# (tools/goldens/common.py) plus the vocabulary, norm and activation of the released models.
V3_COMMON = dict(
    **DEBERTA_V3_ATTENTION,
    vocab_size=128100,
    max_position_embeddings=512,
    type_vocab_size=0,
    layer_norm_eps=1e-7,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)
ENGINES = ("hf-eager", "hf-sdpa", "hf-compile", "disentangled-flash", "disentangled-flash-torch", "flashdeberta")
DEFAULT_ENGINES = {
    "cpu": "hf-eager",
    "cuda": "hf-eager,hf-sdpa,disentangled-flash,flashdeberta",
}
TOL = {"f32": 1e-3, "f16": 5e-2, "bf16": 2e-1}
WHEELS_HINT = (
    "pip download --no-deps disentangled-flash==1.1.1 flashdeberta==0.0.8 einops -d target/wheels; "
    "there: pip install --no-index --no-deps --target /tmp/site target/wheels/*.whl; "
    "export PYTHONPATH=/tmp/site"
)


# tools/gpu/run.sh's emulator dry run: hopscore runs `--device cuda` on the CPU emulator
# of the driver while the PyTorch engines, which have no emulator, run on the CPU.
TORCH_ON_CPU = "HOPSCORE_REFERENCE_TORCH_CPU"


def torch_device(torch, args):
    """The device of the PyTorch engines: --device, unless TORCH_ON_CPU is set."""
    if args.device == "cuda" and not os.environ.get(TORCH_ON_CPU):
        return torch.device("cuda", args.gpu)
    return torch.device("cpu")


class Unavailable(Exception):
    """An engine that cannot run here; the message is the reason shown in its row."""


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def encoder_flops(shape: str, seq_len: int, batch: int) -> float:
    """FLOPs of one forward pass as the model does them, counted as hopscore's bench does
    (src/bench.rs `encoder_flops`): the linears, QK^T and PV, and c2p and p2c against the
    relative-position rows a sequence of this length uses, min(2 * span, 2L - 1) with
    span = position_buckets = 256 (HF's 512 rows at L = 512: 361 GFLOP per sequence for
    deberta-v3-large)."""
    s = SHAPES[shape]
    h = a = float(s["hidden_size"])
    i = float(s["intermediate_size"])
    n = float(seq_len)
    rows = min(2.0 * V3_COMMON["position_buckets"], 2.0 * n - 1.0)
    linear = 2.0 * n * (3.0 * h * a + a * h + 2.0 * h * i)
    attention = 2.0 * a * n * (2.0 * n + 2.0 * rows)  # QK^T, PV, c2p and p2c
    return batch * s["num_hidden_layers"] * (linear + attention)


def torch_dtype(torch, name: str):
    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[name]


def short_error(e: BaseException, limit: int = 300) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    text = f"{type(e).__name__}: {text}" if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_oom(torch, e: BaseException) -> bool:
    oom = getattr(torch.cuda, "OutOfMemoryError", ())
    return (oom and isinstance(e, oom)) or "out of memory" in str(e).lower()


def make_inputs(torch, vocab: int, batch: int, seq_len: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab, (batch, seq_len), generator=gen, dtype=torch.long)
    ids[:, 0] = 1
    ids[:, -1] = 2
    return ids, torch.ones_like(ids)


def build_base(args):
    """The seeded f32 CPU model whose weights every engine receives."""
    import torch
    from transformers import DebertaV2Config, DebertaV2Model

    torch.manual_seed(args.seed)
    config = DebertaV2Config(**V3_COMMON, **SHAPES[args.shape])
    model = DebertaV2Model(config)  # HF init: N(0, initializer_range=0.02)
    model.eval()
    return config, model


def _on_device(torch, factory, base, device, dtype):
    """Builds a model on `device`, casts it to `dtype` and loads the base weights."""
    with torch.device(device):
        model = factory()
    model.to(device=device, dtype=dtype)  # in case the constructor ignored the device context
    model.load_state_dict(base.state_dict(), strict=True)
    model.eval()
    return model


def build_engine(name, args, config, base, device, dtype, seq_lens):
    """Returns (model, note, version); raises Unavailable(reason) when it cannot run."""
    import torch
    import transformers
    from transformers import DebertaV2Model

    if name == "hf-eager":
        cfg = copy.deepcopy(config)
        model = _on_device(torch, lambda: DebertaV2Model._from_config(cfg, attn_implementation="eager"),
                           base, device, dtype)
        return model, f"attn {model.config._attn_implementation}", transformers.__version__

    if name == "hf-sdpa":
        cfg = copy.deepcopy(config)
        try:  # transformers checks support before it allocates anything
            model = _on_device(torch, lambda: DebertaV2Model._from_config(cfg, attn_implementation="sdpa"),
                               base, device, dtype)
        except (ValueError, ImportError, NotImplementedError, TypeError) as e:
            raise Unavailable(
                f"transformers {transformers.__version__} refuses attn_implementation='sdpa' for "
                f"DebertaV2Model: {short_error(e, 160)}"
            ) from None
        impl = model.config._attn_implementation
        if impl != "sdpa":
            raise Unavailable(f"asked for sdpa, transformers set attn_implementation {impl!r}")
        return model, "attn sdpa", transformers.__version__

    if name == "hf-compile":
        if not hasattr(torch, "compile"):
            raise Unavailable(f"torch {torch.__version__} has no torch.compile")
        cfg = copy.deepcopy(config)
        model = _on_device(torch, lambda: DebertaV2Model._from_config(cfg, attn_implementation="eager"),
                           base, device, dtype)
        # Static shapes: one graph per length, compiled during the warm-up passes.
        return torch.compile(model, dynamic=False), "torch.compile of HF eager (inductor)", torch.__version__

    if name in ("disentangled-flash", "disentangled-flash-torch"):
        backend = "torch" if name.endswith("-torch") else "triton"
        try:
            import disentangled_flash as df
        except ImportError as e:
            raise Unavailable(f"not installed ({short_error(e, 80)}); {WHEELS_HINT}") from None
        if backend == "triton" and device.type != "cuda":
            raise Unavailable("its Triton kernel needs CUDA (disentangled-flash-torch runs its PyTorch backend)")
        model = _on_device(torch, lambda: DebertaV2Model._from_config(copy.deepcopy(config),
                                                                       attn_implementation="eager"),
                           base, device, dtype)
        with torch.no_grad():
            df.optimize_deberta(model, backend=backend, inference=True, sequence_lengths=list(seq_lens))
        enc = model.encoder
        if not isinstance(enc, df.DebertaV2OptimizedEncoder) or enc.backend != backend:
            got = getattr(enc, "backend", "the HF encoder (not replaced)")
            raise Unavailable(f"optimize_deberta(backend={backend!r}) gave {got}: Triton missing or unsupported")
        return model, f"backend {enc.backend}", df.__version__

    if name == "flashdeberta":
        try:
            import flashdeberta
        except ImportError as e:
            raise Unavailable(f"not installed ({short_error(e, 80)}); {WHEELS_HINT}") from None
        try:
            from importlib.metadata import version

            ver = version("flashdeberta")
        except Exception:  # noqa: BLE001 - version is informative only
            ver = "?"
        model = _on_device(torch, lambda: flashdeberta.FlashDebertaV2Model(copy.deepcopy(config)),
                           base, device, dtype)
        attn = type(model.encoder.layer[0].attention.self).__name__
        if device.type != "cuda":  # built and loaded (that much is checked here), but cannot run
            raise Unavailable(f"model built ({attn}, weights loaded); its Triton kernels need CUDA")
        return model, attn, ver

    raise Unavailable(f"unknown engine (known: {', '.join(ENGINES)})")


def time_engine(torch, model, ids, mask, args, device, seq_len, name):
    """Warm-up + timed passes; returns (times, first sequence's output as f32 CPU)."""
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    enc = model.encoder
    if hasattr(enc, "activate_shape"):  # disentangled-flash: prepared per length
        enc.activate_shape(seq_len)

    def once():
        return model(input_ids=ids, attention_mask=mask, return_dict=True).last_hidden_state

    with torch.inference_mode():
        out = None
        for _ in range(args.warmup):
            out = once()
        sync()
        times = []
        for _ in range(args.iters):
            t = time.perf_counter()
            out = once()
            if cuda:
                sync()
            else:
                float(out[0, 0, 0])  # touch the result
            times.append(time.perf_counter() - t)
        first = out[0].float().cpu()
    del out
    return times, first


def reference_first(torch, base, ids, cache, seq_len):
    """HF eager, f32, CPU, on the first sequence alone (cached per length)."""
    if seq_len not in cache:
        with torch.inference_mode():
            cache[seq_len] = base(input_ids=ids[:1], attention_mask=torch.ones_like(ids[:1]),
                                  return_dict=True).last_hidden_state[0].float()
    return cache[seq_len]


def bench_engines(args, emit) -> list:
    import torch
    import transformers

    torch.set_num_threads(args.threads)
    device = torch_device(torch, args)
    dtype = torch_dtype(torch, args.dtype)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # f32 means f32, as in hopscore
        torch.backends.cudnn.allow_tf32 = False
        device_name = torch.cuda.get_device_name(device)
    else:
        device_name = platform.processor() or platform.machine()

    t0 = time.perf_counter()
    config, base = build_base(args)
    base_s = time.perf_counter() - t0
    inputs = {L: make_inputs(torch, config.vocab_size, args.batches[L], L, args.seed) for L in args.seq_lens}
    ref_cache = {}
    results = []
    common = {
        "device": torch_label(torch, device), "device_name": device_name, "dtype": args.dtype, "shape": args.shape,
        "iters": args.iters, "warmup": args.warmup, "rounds": args.rounds, "threads": torch.get_num_threads(),
        "torch": torch.__version__, "transformers": transformers.__version__,
    }
    for name in args.engines:
        model, note, version, build_err = None, "", None, None
        t0 = time.perf_counter()
        try:
            model, note, version = build_engine(name, args, config, base, device, dtype, args.seq_lens)
        except Unavailable as e:
            build_err = ("unavailable", str(e))
        except Exception as e:  # noqa: BLE001 - every failure becomes a row
            build_err = ("failed", ("out of memory building the model: " if is_oom(torch, e) else "")
                         + short_error(e))
        build_s = time.perf_counter() - t0 + (base_s if name == args.engines[0] else 0.0)
        for L in args.seq_lens:
            B = args.batches[L]
            row = dict(engine=name, seq_len=L, batch=B, **common)
            if version:
                row["version"] = version
            if build_err:
                row.update(status=build_err[0], reason=build_err[1])
                results.append(row)
                emit(row)
                continue
            ids, mask = (t.to(device) for t in inputs[L])
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            try:
                per_round = []
                for _ in range(args.rounds):
                    times, first = time_engine(torch, model, ids, mask, args, device, L, name)
                    per_round.append(sum(times) / len(times))
            except Exception as e:  # noqa: BLE001
                reason = (f"out of memory at batch {B} x {L}: " if is_oom(torch, e) else "") + short_error(e)
                row.update(status="failed", reason=reason)
                results.append(row)
                emit(row)
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
                continue
            per_batch = statistics.median(per_round)
            row.update(
                status="ok", note=note,
                seconds_per_batch=per_batch, rounds_seconds_per_batch=per_round,
                tokens_per_s=B * L / per_batch, sequences_per_s=B / per_batch,
                gflops=encoder_flops(args.shape, L, B) / per_batch / 1e9, build_s=build_s,
            )
            if device.type == "cuda":
                row["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
            if args.check:
                ref = reference_first(torch, base, inputs[L][0], ref_cache, L)
                row["max_abs_diff"] = float((first - ref).abs().max())
                row["ref_max_abs"] = float(ref.abs().max())
            results.append(row)
            emit(row)
        del model
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.check:
        for L in args.seq_lens:
            eager = next((r for r in results if r["engine"] == "hf-eager" and r["seq_len"] == L
                          and "max_abs_diff" in r), None)
            limit = max(TOL[args.dtype], 4.0 * eager["max_abs_diff"] if eager else 0.0)
            for r in results:
                if r["seq_len"] == L and "max_abs_diff" in r:
                    r["check_limit"] = limit
                    r["check"] = "ok" if r["max_abs_diff"] <= limit else "MISMATCH"
    return results


def hopscore_engine(attention: str, args) -> str:
    """The row name of hopscore with one disentangled-attention kernel version."""
    return "hopscore" if attention == args.hopscore_attention[0] else f"hopscore-{attention}"


def bench_hopscore_rounds(args, seq_len: int, attention: str) -> dict:
    """`--rounds` runs of `hopscore bench`: the row of the median run (its peak and kernel
    split from that same run), with every round's seconds per batch; the first failed
    run's row if one fails."""
    rows = [bench_hopscore(args, seq_len, attention) for _ in range(args.rounds)]
    failed = next((r for r in rows if r.get("status") != "ok"), None)
    if failed:
        return failed
    median = sorted(rows, key=lambda r: r["seconds_per_batch"])[len(rows) // 2]
    median["rounds_seconds_per_batch"] = [r["seconds_per_batch"] for r in rows]
    return median


def bench_hopscore(args, seq_len: int, attention: str) -> dict:
    binary = args.hopscore
    batch = args.batches[seq_len]
    row = {"engine": hopscore_engine(attention, args), "seq_len": seq_len, "batch": batch,
           "device": hopscore_label(args.device, args.gpu), "attention": attention}
    if args.device == "cuda":
        base = [
            binary, "bench", "--device", "cuda", "--gpu", str(args.gpu), "--dtype", args.dtype,
            "--shape", args.shape, "--seq-len", str(seq_len), "--batch", str(batch),
            "--warmup", str(args.warmup), "--iters", str(args.iters),
        ]
        if args.peak_gemm is not None:
            base += ["--peak-gemm", str(args.peak_gemm)]
        attempts = [base + ["--json"]]
    else:
        base = [
            binary, "bench", "--device", "cpu", "--shape", args.shape,
            "--seq-len", str(seq_len), "--batch", str(batch), "--iters", str(args.iters),
        ]
        attempts = [base + ["--threads", str(args.threads), "--json"], base + ["--json"]]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    if attention != "default":
        env["HOPSCORE_ATTENTION"] = attention
    last = None
    for n, cmd in enumerate(attempts):
        print("running: " + " ".join(cmd), file=sys.stderr)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
        except subprocess.TimeoutExpired:
            row.update(status="failed", reason=f"timed out after {args.timeout:.0f} s")
            return row
        last = proc
        if proc.returncode == 0:
            if n == 1:
                print(
                    "warning: the hopscore binary rejected --threads; ran without it "
                    f"(RAYON_NUM_THREADS={args.threads} set instead)",
                    file=sys.stderr,
                )
            break
        unknown_flag = "--threads" in proc.stderr and (
            "unexpected argument" in proc.stderr or "unrecognized" in proc.stderr or "unknown" in proc.stderr
        )
        if not unknown_flag:
            break
    if last.returncode != 0:
        sys.stderr.write(last.stderr)
        tail = [x for x in last.stderr.strip().splitlines() if x.strip()]
        row.update(status="failed", reason=f"exit {last.returncode}: " + (tail[-1] if tail else "no stderr"))
        return row
    result = None
    for line in last.stdout.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if "tokens_per_s" in obj:
                result = obj
    if result is None:
        sys.stderr.write(last.stdout)
        row.update(status="failed", reason="printed no JSON line with a tokens_per_s field")
        return row
    result["engine"] = row["engine"]
    result["attention"] = attention
    result.setdefault("dtype", args.dtype if args.device == "cuda" else "f32")
    result["status"] = "ok"
    return result


def fmt_row(cols, widths):
    return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


def print_table(args, results):
    first = next((r for r in results if r.get("device_name")), {})
    print(
        f"shape {args.shape}  device {args.device} ({first.get('device_name', '?')})  dtype {args.dtype}  "
        f"iters {args.iters} (+{args.warmup} warm-up)  threads {args.threads}"
    )
    if first:
        print(f"torch {first['torch']}, transformers {first['transformers']}, inference_mode; "
              "max|d|: first sequence vs HF eager f32 on CPU")
    for L in args.seq_lens:
        rows_l = [r for r in results if r["seq_len"] == L]
        B = args.batches[L]
        print(f"\n== seq_len {L}, batch {B} ({B * L:,} tokens)")
        ok = [r for r in rows_l if r.get("status") == "ok"]
        ref = next((r for r in ok if not r["engine"].startswith("hopscore")), None)
        hop = next((r for r in ok if r["engine"] == "hopscore"), None)
        unit, scale = ("TFLOP/s", 1e3) if args.device == "cuda" else ("GFLOP/s", 1.0)
        header = ["engine", "s/batch", "tokens/s", "seq/s", unit,
                  f"vs {ref['engine']}" if ref else "vs ref", "hopscore/engine", "max|d|", "check", "note"]
        rows, reasons = [], []
        for r in rows_l:
            if r.get("status") != "ok":
                rows.append([r["engine"], "-", "-", "-", "-", "-", "-", "-", r.get("status", "?"), "see below"])
                reasons.append(f"  {r['engine']}: {r.get('status', '?')}: {r.get('reason', '')}")
                continue
            tps = r["tokens_per_s"]
            gflops = r.get("gflops", encoder_flops(args.shape, L, r.get("batch", B)) * tps / (L * B) / 1e9)
            note = r.get("note", "")
            if r["engine"] == "hopscore":
                note = f"{r.get('device', '')}".strip()
            elif r.get("peak_mem_gib") is not None:
                note = f"{note}, peak {r['peak_mem_gib']:.1f} GiB"
            rows.append([
                r["engine"],
                f"{r['seconds_per_batch']:.4f}" if "seconds_per_batch" in r else "?",
                f"{tps:,.0f}",
                f"{r.get('sequences_per_s', tps / L):.2f}",
                f"{gflops / scale:.1f}",
                f"{tps / ref['tokens_per_s']:.2f}x" if ref else "-",
                f"{hop['tokens_per_s'] / tps:.2f}x" if hop else "-",
                f"{r['max_abs_diff']:.2e}" if "max_abs_diff" in r else "-",
                r.get("check", "-"),
                note,
            ])
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        widths[-1] = 0  # the note is left-aligned, unpadded
        print(fmt_row(header, widths))
        for row in rows:
            print(fmt_row(row[:-1], widths[:-1]) + "  " + row[-1])
        for line in reasons:
            print(line)
        if hop and ref:
            print(f"ratio hopscore/{ref['engine']} (tokens/s): {hop['tokens_per_s'] / ref['tokens_per_s']:.3f}")
        if hop and hop.get("peak_share") is not None and hop.get("gemm_peak_tflops"):
            peak = hop["gemm_peak_tflops"]
            print(f"hopscore: {hop['gflops'] / 1e3:.1f} TFLOP/s = {100 * hop['peak_share']:.1f}% of its measured "
                  f"{args.dtype} GEMM peak ({peak:.1f} TFLOP/s); on that scale: " + ", ".join(
                      f"{r['engine']} {100 * r['gflops'] / 1e3 / peak:.1f}%" for r in ok
                      if r is not hop and "gflops" in r))
        if hop and hop.get("kernels"):
            total = sum(k.get("ms", 0.0) for k in hop["kernels"]) or 1e-12
            top = sorted(hop["kernels"], key=lambda k: -k.get("ms", 0.0))[:5]
            print("hopscore top-5 kernels (one profiled pass):")
            for k in top:
                print(f"  {k.get('kernel', '?'):<36} {k.get('calls', 0):>6} calls {k.get('ms', 0.0):>10.3f} ms "
                      f"{100 * k.get('ms', 0.0) / total:>5.1f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="Benchmark PyTorch DeBERTa-v3 encoders (HF transformers, disentangled-flash, "
        "flashdeberta; random weights) on CPU or CUDA, optionally against hopscore",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--shape", choices=sorted(SHAPES), default="deberta-v3-base")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--gpu", type=int, default=0, help="CUDA device ordinal (with --device cuda)")
    ap.add_argument("--dtype", choices=["f32", "bf16", "f16"], help="default: f32 on cpu, bf16 on cuda")
    ap.add_argument("--engines", help=f"comma list of {', '.join(ENGINES)} (default: {DEFAULT_ENGINES['cpu']} "
                    f"on cpu; {DEFAULT_ENGINES['cuda']} on cuda)")
    ap.add_argument("--batch", type=int, help="sequences per pass (default: 8 on cpu; 65536 // seq_len on cuda)")
    ap.add_argument("--seq-len", type=int, help="tokens per sequence (default 256)")
    ap.add_argument("--seq-lens", help="several lengths in one run, e.g. 256,512 (instead of --seq-len)")
    ap.add_argument("--iters", type=int, help="timed iterations (default: 3 on cpu, 10 on cuda)")
    ap.add_argument("--warmup", type=int, help="untimed iterations first (default: 1 on cpu, 3 on cuda)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="time every engine this many times (each --warmup + --iters) and report the "
                    "median round's seconds per batch (odd counts give a true median)")
    ap.add_argument("--threads", type=int, default=cpu_count(), help="intra-op threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hopscore", metavar="BIN", help="also run `BIN bench ... --json` and compare")
    ap.add_argument("--peak-gemm", type=int, metavar="N",
                    help="hopscore bench's --peak-gemm on cuda (0 skips the peak GEMM; default: hopscore's)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds allowed for each hopscore run")
    ap.add_argument("--no-check", dest="check", action="store_false",
                    help="skip the comparison of each engine's output with the f32 reference")
    ap.add_argument("--hopscore-attention", default="default",
                    help="comma list of hopscore disentangled-attention kernels to time, a row each "
                    "(HOPSCORE_ATTENTION=v3|v5, the --attention flag; 'default' leaves the binary's choice)")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON line per (engine, seq_len) as each is measured (hopscore "
                    "first), then the table on stderr")
    args = ap.parse_args(argv)

    cuda = args.device == "cuda"
    args.dtype = args.dtype or ("bf16" if cuda else "f32")
    args.iters = args.iters if args.iters is not None else (10 if cuda else 3)
    args.warmup = args.warmup if args.warmup is not None else (3 if cuda else 1)
    args.engines = [e.strip() for e in (args.engines or DEFAULT_ENGINES[args.device]).split(",") if e.strip()]
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown:
        ap.error(f"--engines: unknown {', '.join(unknown)} (known: {', '.join(ENGINES)})")
    if args.seq_lens and args.seq_len is not None:
        ap.error("give --seq-len or --seq-lens, not both")
    try:
        args.seq_lens = ([int(x) for x in args.seq_lens.split(",") if x.strip()] if args.seq_lens
                         else [args.seq_len if args.seq_len is not None else 256])
    except ValueError:
        ap.error("--seq-lens takes comma-separated integers, e.g. 256,512")
    args.seq_lens = list(dict.fromkeys(args.seq_lens))
    if not args.seq_lens or not all(2 <= L <= 512 for L in args.seq_lens):
        ap.error("--seq-len(s) must be in [2, 512] (max_position_embeddings 512)")
    if (args.batch is not None and args.batch < 1) or min(args.iters, args.threads, args.rounds) < 1 \
            or args.warmup < 0:
        ap.error("--batch, --iters, --threads and --rounds must be >= 1, --warmup >= 0")
    args.hopscore_attention = [a.strip() for a in args.hopscore_attention.split(",") if a.strip()] or ["default"]
    args.batches = {L: args.batch if args.batch is not None else (max(1, 65536 // L) if cuda else 8)
                    for L in args.seq_lens}
    if args.hopscore:
        binary = args.hopscore
        if os.sep not in binary and shutil.which(binary):
            binary = shutil.which(binary)
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            raise SystemExit(f"--hopscore: {args.hopscore!r} is not an executable file")
        args.hopscore = binary

    if cuda and not os.environ.get(TORCH_ON_CPU):
        import torch

        if not torch.cuda.is_available() or args.gpu >= torch.cuda.device_count():
            print(
                f"error: --device cuda: no CUDA device (torch {torch.__version__}, built with CUDA "
                f"{torch.version.cuda}; torch.cuda.is_available() = {torch.cuda.is_available()}, "
                f"device_count = {torch.cuda.device_count()}, --gpu {args.gpu})",
                file=sys.stderr,
            )
            return 2

    # Rows are printed as they are measured, hopscore first, so that a run cut short by
    # a timeout keeps what it measured.
    def emit(row):
        if args.json:
            print(json.dumps(row), flush=True)

    results = []
    hop_failed = False
    if args.hopscore:
        for attention in args.hopscore_attention:
            for L in args.seq_lens:
                r = bench_hopscore_rounds(args, L, attention)
                hop_failed |= r.get("status") != "ok"
                results.append(r)
                emit(r)
    results += bench_engines(args, emit)
    for L in args.seq_lens:  # ratios hopscore / engine on every engine's row
        hop = next((r for r in results if r["engine"] == "hopscore" and r["seq_len"] == L
                    and r.get("status") == "ok"), None)
        if hop:
            for r in results:
                if r["seq_len"] == L and r.get("status") == "ok" and not r["engine"].startswith("hopscore"):
                    r["hopscore_ratio"] = hop["tokens_per_s"] / r["tokens_per_s"]
    with contextlib.redirect_stdout(sys.stderr if args.json else sys.stdout):
        print_table(args, results)
    return 1 if hop_failed else 0


if __name__ == "__main__":
    sys.exit(main())
