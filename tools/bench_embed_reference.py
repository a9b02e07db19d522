#!/usr/bin/env python3
"""`hopscore embed` next to sentence-transformers (PyTorch) on the same passages, in one
run, with the same thread count; the vectors compared row by row.

    python3 tools/bench_embed_reference.py --corpus corpus.parquet --model weights/all-minilm-l6-v2 \
        --hopscore target/release/hopscore --threads 2 [--device cpu|cuda] [--dtype f32|bf16] \
        [--limit N] [--repeat N] [--batch-size N] [--max-batch-tokens N] [--json]

The corpus is a passage Parquet (`id`, `title`, `text`; tools/dense_retrieval_eval.sh
writes one from the 600 HotpotQA dev questions, through tools/questions_to_corpus.py).
Both sides embed `title + " " + text`
truncated at the model's max_seq_length; sentence-transformers sorts by length and pads
per batch (`--batch-size`, its default 32), hopscore packs by token budget. Reported:
passages/s and tokens/s of each (model load excluded on both sides: hopscore's load is
timed apart by a 1-row run), the ratio, min cosine and max |Δ| between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_device import hopscore_label, torch_label  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--hopscore", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="f32", help="hopscore --dtype and torch dtype on cuda")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--limit", type=int, default=0, help="first N passages only")
    ap.add_argument("--repeat", type=int, default=1, help="embed the passages N times over (GPU runs)")
    ap.add_argument("--max-batch-tokens", type=int, default=0, help="hopscore's token budget (default: its own)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    table = pq.read_table(args.corpus)
    if args.limit:
        table = table.slice(0, args.limit)
    if args.repeat > 1:
        table = pa.concat_tables([table] * args.repeat)
    rows = table.to_pylist()
    texts = [f"{r['title']} {r['text']}" if r.get("title") else r["text"] for r in rows]

    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.parquet")
        pq.write_table(table, corpus)
        one = os.path.join(tmp, "one.parquet")
        pq.write_table(table.slice(0, 1), one)
        base = [args.hopscore, "--threads", str(args.threads), "embed", "--model", args.model,
                "--device", args.device, "--dtype", args.dtype]
        if args.max_batch_tokens:
            base += ["--max-batch-tokens", str(args.max_batch_tokens)]

        def run(inp: str, out: str) -> float:
            t = time.perf_counter()
            subprocess.run(base + ["--input", inp, "--output", out], check=True,
                           stderr=subprocess.DEVNULL)
            return time.perf_counter() - t

        load = run(one, os.path.join(tmp, "one.out.parquet"))
        total = run(corpus, os.path.join(tmp, "out.parquet"))
        ours = np.array(pq.read_table(os.path.join(tmp, "out.parquet"))["embedding"].to_pylist(), dtype=np.float32)

    model = SentenceTransformer(args.model, device=args.device)
    if args.device == "cuda" and args.dtype in ("bf16", "f16"):
        model = model.to(torch.bfloat16 if args.dtype == "bf16" else torch.float16)
    lengths = {t: len(model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"]) for t in set(texts)}
    tokens = sum(lengths[t] for t in texts)
    model.encode(texts[: args.batch_size], batch_size=args.batch_size)  # warm-up
    t = time.perf_counter()
    ref = model.encode(texts, batch_size=args.batch_size, convert_to_tensor=True)
    if args.device == "cuda":
        torch.cuda.synchronize()
    st_secs = time.perf_counter() - t
    ref = ref.float().cpu().numpy()
    ours_secs = max(total - load, 1e-9)
    cos = (ours * ref).sum(1) / (np.linalg.norm(ours, axis=1) * np.linalg.norm(ref, axis=1))
    result = {
        "model": os.path.basename(os.path.normpath(args.model)),
        "passages": len(texts), "tokens": tokens, "threads": args.threads, "device": torch_label(torch, model.device),
        "hopscore_device": hopscore_label(args.device),
        "dtype": args.dtype, "torch": torch.__version__,
        "hopscore_s": round(ours_secs, 3), "hopscore_load_s": round(load, 3),
        "sentence_transformers_s": round(st_secs, 3),
        "hopscore_passages_per_s": round(len(texts) / ours_secs, 1),
        "sentence_transformers_passages_per_s": round(len(texts) / st_secs, 1),
        "hopscore_tokens_per_s": round(tokens / ours_secs),
        "ratio": round(st_secs / ours_secs, 3),
        "min_cosine": float(cos.min()), "max_abs_diff": float(np.abs(ours - ref).max()),
    }
    print(json.dumps(result) if args.json else "\n".join(f"{k}: {v}" for k, v in result.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
