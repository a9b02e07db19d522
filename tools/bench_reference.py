#!/usr/bin/env python3
"""CPU throughput of the PyTorch / HF transformers DeBERTa-v3 encoder (the reference).

Runs ``transformers.DebertaV2Model`` with random weights in a DeBERTa-v3 shape, fp32,
eval mode, under ``torch.inference_mode()``, on CPU, and prints tokens/s. Optionally
runs hopscore's own benchmark with the same settings and prints both side by side.

Exact commands (from the repository root):

    # reference only, deberta-v3-base shape, batch 8 x 256 tokens, all cores
    HF_HUB_OFFLINE=1 /work/venvs/ref/bin/python tools/bench_reference.py

    # reference vs hopscore (release build), same threads/shape/batch/length/iters
    cargo build --release
    HF_HUB_OFFLINE=1 /work/venvs/ref/bin/python tools/bench_reference.py \\
        --hopscore target/release/hopscore --threads 2

    # quick check (hidden 256, 4 layers)
    HF_HUB_OFFLINE=1 /work/venvs/ref/bin/python tools/bench_reference.py --shape small --iters 2

Flags: ``--shape {small,deberta-v3-base,deberta-v3-large}`` (default deberta-v3-base),
``--batch`` (8), ``--seq-len`` (256), ``--iters`` (3 timed, after ``--warmup`` 1),
``--threads`` (default: all cores), ``--seed`` (0), ``--hopscore BIN``, ``--json``
(print one JSON line per engine instead of the table).

With ``--hopscore BIN`` it runs::

    BIN bench --device cpu --shape SHAPE --seq-len L --batch B --iters I --threads N --json

and reads the ``tokens_per_s`` field of the JSON line it prints; the table gives
both engines and the ratio hopscore / pytorch (> 1 means hopscore is faster).
RAYON_NUM_THREADS / OMP_NUM_THREADS are also set to N for the child. If the binary
does not know ``--threads`` yet, the call is retried without it (the environment
variables then carry the thread count) and a warning says so.

Shapes (random weights; vocab 128100, max_position_embeddings 512,
relative_attention, position_buckets 256, pos_att_type p2c|c2p, share_att_key,
norm_rel_ebd layer_norm, no absolute positions, type_vocab_size 0):

    small             hidden 256,  4 layers,  4 heads, intermediate 1024
    deberta-v3-base   hidden 768, 12 layers, 12 heads, intermediate 3072
    deberta-v3-large  hidden 1024, 24 layers, 16 heads, intermediate 4096

Inputs: ``batch`` rows of ``seq-len`` random ids in [3, vocab) drawn with a fixed
seed, [CLS]=1 first and [SEP]=2 last, full attention mask (no padding), as
hopscore's bench does. Weights are drawn with N(0, 0.02) (HF's default init).
Timing: wall clock (time.perf_counter) over the timed iterations, mean per batch.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

SHAPES = {
    "small": dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024),
    "deberta-v3-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072),
    "deberta-v3-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}
V3_COMMON = dict(
    vocab_size=128100,
    max_position_embeddings=512,
    relative_attention=True,
    position_buckets=256,
    max_relative_positions=-1,
    pos_att_type=["p2c", "c2p"],
    share_att_key=True,
    norm_rel_ebd="layer_norm",
    position_biased_input=False,
    type_vocab_size=0,
    layer_norm_eps=1e-7,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
)


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def bench_pytorch(args) -> dict:
    import torch
    import transformers
    from transformers import DebertaV2Config, DebertaV2Model

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    config = DebertaV2Config(**V3_COMMON, **SHAPES[args.shape])
    t0 = time.perf_counter()
    model = DebertaV2Model(config)  # HF init: N(0, initializer_range=0.02)
    model.eval()
    build_s = time.perf_counter() - t0

    gen = torch.Generator().manual_seed(args.seed)
    ids = torch.randint(3, config.vocab_size, (args.batch, args.seq_len), generator=gen, dtype=torch.long)
    ids[:, 0] = 1
    ids[:, -1] = 2
    mask = torch.ones_like(ids)

    def once():
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        return float(out[0, 0, 0])  # touch the result

    with torch.inference_mode():
        for _ in range(args.warmup):
            once()
        times = []
        for _ in range(args.iters):
            t = time.perf_counter()
            once()
            times.append(time.perf_counter() - t)
    per_batch = sum(times) / len(times)
    tokens = args.batch * args.seq_len
    return {
        "engine": "pytorch",
        "device": "cpu",
        "shape": args.shape,
        "seq_len": args.seq_len,
        "batch": args.batch,
        "iters": args.iters,
        "threads": torch.get_num_threads(),
        "seconds_per_batch": per_batch,
        "seconds_min": min(times),
        "tokens_per_s": tokens / per_batch,
        "sequences_per_s": args.batch / per_batch,
        "build_s": build_s,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def bench_hopscore(args) -> dict:
    binary = args.hopscore
    if os.sep not in binary and shutil.which(binary):
        binary = shutil.which(binary)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise SystemExit(f"--hopscore: {args.hopscore!r} is not an executable file")
    base = [
        binary, "bench", "--device", "cpu", "--shape", args.shape,
        "--seq-len", str(args.seq_len), "--batch", str(args.batch), "--iters", str(args.iters),
    ]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    attempts = [base + ["--threads", str(args.threads), "--json"], base + ["--json"]]
    last = None
    for n, cmd in enumerate(attempts):
        print("running: " + " ".join(cmd), file=sys.stderr)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
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
        raise SystemExit(f"hopscore bench failed (exit {last.returncode})")
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
        raise SystemExit("hopscore bench printed no JSON line with a tokens_per_s field")
    result.setdefault("engine", "hopscore")
    return result


def fmt_row(cols, widths):
    return "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(cols, widths)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(
        description="CPU benchmark of HF DebertaV2Model (random weights), optionally against hopscore",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    ap.add_argument("--shape", choices=sorted(SHAPES), default="deberta-v3-base")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--iters", type=int, default=3, help="timed iterations")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations first")
    ap.add_argument("--threads", type=int, default=cpu_count(), help="intra-op threads (default: all cores)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hopscore", metavar="BIN", help="also run `BIN bench ... --json` and compare")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds allowed for the hopscore run")
    ap.add_argument("--json", action="store_true", help="print one JSON line per engine instead of a table")
    args = ap.parse_args(argv)

    if args.batch < 1 or args.iters < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--batch, --iters and --threads must be >= 1, --warmup >= 0")
    if not 2 <= args.seq_len <= 512:
        ap.error("--seq-len must be in [2, 512] (max_position_embeddings 512)")

    results = [bench_pytorch(args)]
    if args.hopscore:
        results.append(bench_hopscore(args))

    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0

    ref = results[0]
    print(
        f"shape {args.shape}  batch {args.batch} x seq_len {args.seq_len}  iters {args.iters} "
        f"(+{args.warmup} warm-up)  threads {args.threads}  cpu: {platform.processor() or platform.machine()}"
    )
    print(f"pytorch: torch {ref['torch']}, transformers {ref['transformers']}, fp32, inference_mode")
    header = ["engine", "threads", "s/batch", "tokens/s", "seq/s", "vs pytorch"]
    rows = []
    for r in results:
        ratio = r["tokens_per_s"] / ref["tokens_per_s"]
        rows.append([
            r.get("engine", "?"),
            r.get("threads", "?"),
            f"{r['seconds_per_batch']:.4f}" if "seconds_per_batch" in r else "?",
            f"{r['tokens_per_s']:.1f}",
            f"{r.get('sequences_per_s', r['tokens_per_s'] / args.seq_len):.2f}",
            f"{ratio:.2f}x",
        ])
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    print(fmt_row(header, widths))
    for row in rows:
        print(fmt_row(row, widths))
    if len(results) > 1:
        print(f"ratio hopscore/pytorch (tokens/s): {results[1]['tokens_per_s'] / ref['tokens_per_s']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
