#!/usr/bin/env python3
"""CPU encoder throughput: hopscore (f32, bf16, q8, int8 dense layers) against what a CPU
user would pick instead — ONNX Runtime (fp32, fp32 + its transformer optimizer, int8
dynamic quantisation) and PyTorch eager — on a DeBERTa-v3 shape, interleaved.

One seeded f32 ``DebertaV2Model`` (random weights, HF's initialisation, the v3 config
of tools/bench_reference.py) is exported to ONNX (opset 17, TorchScript exporter,
dynamic batch and length) and from that file:

    ort-fp32   onnxruntime InferenceSession, graph optimisations ORT_ENABLE_ALL
    ort-opt    onnxruntime.transformers.optimizer.optimize_model(model_type="bert")
               (fused LayerNorm/GELU/bias; DeBERTa's disentangled attention is not
               fused by it), then as ort-fp32
    ort-int8   onnxruntime.quantization.quantize_dynamic(per_channel=True,
               weight_type=QInt8): uint8 activations quantised per tensor at run time,
               int8 weights per output channel, every MatMul
    torch      the same model in PyTorch eager under torch.inference_mode()
    hopscore, hopscore-bf16, hopscore-q8, hopscore-int8
               `hopscore bench --device cpu --cpu-gemm f32|bf16|q8|int8` (its own seeded
               random weights of the same shape: throughput does not depend on the
               values; accuracy is tested on the parity goldens, docs/parity.md)

Every engine runs ``--threads`` intra-op threads (2 by default) on the same batch
shapes: for each length L, ``4096 // L`` sequences of L tokens (no padding). Each round
runs every engine once (warm-up pass, then ``--iters`` timed passes); the table gives
the median round's sequences/s and the ratio of each engine to hopscore f32, and the
two targets of issue 28: hopscore f32 / ort-fp32 and hopscore-int8 / ort-int8.

    cargo build --release
    .venv/bin/python tools/bench_cpu_peers.py --hopscore target/release/hopscore
    # quick check: --shape small --seq-lens 128 --rounds 1 --iters 1

Also ``--engines`` (comma list), ``--json`` (one line per engine and length), ``--keep``
(a folder for the ONNX files, reused when present).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_reference import SHAPES, V3_COMMON, make_inputs  # noqa: E402

ENGINES = ("hopscore", "hopscore-bf16", "hopscore-q8", "hopscore-int8", "ort-fp32", "ort-opt", "ort-int8", "torch")
TOKENS_PER_PASS = 4096


def export(model, config, folder: str) -> dict:
    """The three ONNX files (fp32, optimised, int8) of the model, made once."""
    import torch

    paths = {k: os.path.join(folder, f"deberta-{k}.onnx") for k in ("fp32", "opt", "int8")}
    if not os.path.exists(paths["fp32"]):
        ids, mask = make_inputs(torch, config.vocab_size, 2, 64, 0)
        axes = {0: "batch", 1: "length"}
        torch.onnx.export(
            model, (ids, mask), paths["fp32"], input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"], opset_version=17, dynamo=False,
            dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes},
        )
    if not os.path.exists(paths["opt"]):
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(paths["fp32"], model_type="bert", num_heads=config.num_attention_heads,
                             hidden_size=config.hidden_size)
        opt.save_model_to_file(paths["opt"])
    if not os.path.exists(paths["int8"]):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(paths["fp32"], paths["int8"], weight_type=QuantType.QInt8, per_channel=True)
    return paths


def ort_runner(path: str, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})


def torch_runner(model):
    import torch

    def run(ids, mask):
        with torch.inference_mode():
            return model(ids, mask).last_hidden_state

    return run


def time_python(run, ids, mask, iters: int) -> float:
    run(ids, mask)  # warm-up
    start = time.perf_counter()
    for _ in range(iters):
        run(ids, mask)
    return iters * ids.shape[0] / (time.perf_counter() - start)


def time_hopscore(args, engine: str, seq_len: int, batch: int) -> float:
    gemm = engine.split("-")[1] if "-" in engine else "f32"
    cmd = [args.hopscore, "bench", "--device", "cpu", "--cpu-gemm", gemm, "--shape", args.shape,
           "--seq-len", str(seq_len), "--batch", str(batch), "--iters", str(args.iters),
           "--threads", str(args.threads), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {proc.stderr.strip()[-400:]}")
    result = next(json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{"))
    return result["tokens_per_s"] / seq_len


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="deberta-v3-base")
    ap.add_argument("--seq-lens", default="128,256,512")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--hopscore", metavar="BIN", help="the hopscore binary (hopscore rows are skipped without it)")
    ap.add_argument("--keep", metavar="DIR", help="folder for the ONNX files (default: a temporary one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)

    import torch
    from transformers import DebertaV2Config, DebertaV2Model

    torch.set_num_threads(args.threads)
    engines = [e for e in args.engines.split(",") if e]
    unknown = set(engines) - set(ENGINES)
    if unknown:
        ap.error(f"unknown engines {sorted(unknown)}; known: {', '.join(ENGINES)}")
    if not args.hopscore:
        engines = [e for e in engines if not e.startswith("hopscore")]
    torch.manual_seed(args.seed)
    config = DebertaV2Config(**V3_COMMON, **SHAPES[args.shape])
    model = DebertaV2Model(config).eval()
    folder = args.keep or tempfile.mkdtemp(prefix="hopscore-onnx-")
    os.makedirs(folder, exist_ok=True)
    paths = export(model, config, folder) if any(e.startswith("ort") for e in engines) else {}
    runners = {"torch": torch_runner(model)}
    for e in engines:
        if e.startswith("ort-"):
            runners[e] = ort_runner(paths[e.split("-")[1]], args.threads)

    lengths = [int(x) for x in args.seq_lens.split(",")]
    rates = {(e, L): [] for e in engines for L in lengths}
    for r in range(args.rounds):
        for L in lengths:
            batch = max(1, TOKENS_PER_PASS // L)
            ids, mask = make_inputs(torch, config.vocab_size, batch, L, args.seed + r)
            for e in engines:
                rate = (time_hopscore(args, e, L, batch) if e.startswith("hopscore")
                        else time_python(runners[e], ids, mask, args.iters))
                rates[(e, L)].append(rate)
                print(f"round {r + 1}/{args.rounds} L={L} {e}: {rate:.2f} seq/s", file=sys.stderr)

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    flags = sorted({f for line in open("/proc/cpuinfo") if line.startswith("flags")
                    for f in line.split() if f in ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_int8")})
    if args.json:
        for (e, L), v in rates.items():
            print(json.dumps({"engine": e, "seq_len": L, "batch": max(1, TOKENS_PER_PASS // L),
                              "seq_per_s": statistics.median(v), "threads": args.threads, "shape": args.shape}))
        return 0
    print(f"{args.shape}, {args.threads} threads, {cpu} ({' '.join(flags)}), median of {args.rounds} "
          f"interleaved rounds of {args.iters} passes; sequences/s (ratio to hopscore f32)")
    print("| engine | " + " | ".join(f"L={L} b={max(1, TOKENS_PER_PASS // L)}" for L in lengths) + " |")
    print("|---|" + "---|" * len(lengths))
    base = "hopscore" if "hopscore" in engines else engines[0]
    for e in engines:
        cells = []
        for L in lengths:
            v, b = statistics.median(rates[(e, L)]), statistics.median(rates[(base, L)])
            cells.append(f"{v:.2f} ({v / b:.2f})")
        print(f"| {e} | " + " | ".join(cells) + " |")
    for ours, peer, target in (("hopscore", "ort-fp32", 1.2), ("hopscore-int8", "ort-int8", 1.0)):
        if ours in engines and peer in engines:
            ratios = [statistics.median(rates[(ours, L)]) / statistics.median(rates[(peer, L)]) for L in lengths]
            print(f"{ours} / {peer}: " + ", ".join(f"L={L} {x:.2f}x" for L, x in zip(lengths, ratios))
                  + f" (target {target}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
