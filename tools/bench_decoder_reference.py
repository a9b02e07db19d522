#!/usr/bin/env python3
"""CPU throughput of LEPUS log-likelihood scoring: hopscore vs PyTorch (HF transformers).

Both engines score the same token ids: LEPUS prompt/question pairs built from HotpotQA
dev (one gold passage per question, the prompt of tools/goldens/make_decoder_goldens.py),
tokenised once here with the HF tokenizer of the model, written to a pairs JSON file
that ``hopscore bench-loglik`` reads. Model: SmolLM2-135M-Instruct from the GGUF that
tools/fetch_smollm2.sh puts in weights/smollm2/ (HF dequantises it to f32; hopscore
dequantises it to f32 too), fp32 on CPU, the same thread count on both sides.

Exact commands (from the repository root):

    bash tools/fetch_smollm2.sh
    cargo build --release
    python3 tools/bench_decoder_reference.py \\
        --hopscore target/release/hopscore --threads 2

Flags: ``--pairs`` (64 questions), ``--max-batch-tokens`` (4096: both engines group
the length-sorted pairs into batches of at most this many real tokens), ``--iters``
(3 timed passes over all pairs, after ``--warmup`` 1), ``--rounds`` (1: the engines
run one after the other this many times, interleaved, and the median round of each
is reported, which damps drift on a shared machine), ``--threads`` (default: all
cores), ``--hopscore BIN`` (omit to run PyTorch only), ``--json``.

PyTorch runs two ways, under ``torch.inference_mode()``:
- ``pytorch-full``: ``model(input_ids, attention_mask).logits`` for every position of
  the right-padded batch, then log-softmax and a gather of the target tokens (what a
  plain HF scoring loop does);
- ``pytorch-targets``: the decoder body on the padded batch, then the LM head only on
  the rows that predict target tokens (the same work split hopscore uses).
Throughput is real (unpadded) prompt + target tokens per second of wall clock
(``time.perf_counter``), mean over the timed passes. The table also prints each
engine's mean per-pair log-likelihood: they must agree to about 1e-4.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "goldens"))
from common import hotpot_rows, lepus_prompt, offline, require_smollm2  # noqa: E402


def build_pairs(tok, n):
    pairs = []
    for r in hotpot_rows()[:n]:
        gold = {t for t, _ in r["supporting_facts"]}
        title, sents = next(c for c in r["context"] if c[0] in gold)
        prompt = lepus_prompt(title, sents)
        pi = tok(prompt, add_special_tokens=False)["input_ids"]
        ti = tok(" " + r["question"], add_special_tokens=False)["input_ids"]
        pairs.append({"ids": pi + ti, "target_start": len(pi)})
    return pairs


def groups(pairs, budget):
    order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i]["ids"]))
    out, used = [], 0
    for i in order:
        n = len(pairs[i]["ids"])
        if out and used + n <= budget:
            out[-1].append(i)
            used += n
        else:
            out.append([i])
            used = n
    return out


def bench_pytorch(args, model, pairs, mode):
    import torch

    batches = []
    for g in groups(pairs, args.max_batch_tokens):
        L = max(len(pairs[i]["ids"]) for i in g)
        ids = torch.zeros(len(g), L, dtype=torch.long)
        mask = torch.zeros(len(g), L, dtype=torch.long)
        for b, i in enumerate(g):
            n = len(pairs[i]["ids"])
            ids[b, :n] = torch.tensor(pairs[i]["ids"])
            mask[b, :n] = 1
        rows_b, rows_t, tgt = [], [], []
        for b, i in enumerate(g):
            p = pairs[i]
            for t in range(p["target_start"], len(p["ids"])):
                rows_b.append(b)
                rows_t.append(t - 1)
                tgt.append(p["ids"][t])
        batches.append((g, ids, mask, torch.tensor(rows_b), torch.tensor(rows_t), torch.tensor(tgt)))

    def once():
        means = {}
        with torch.inference_mode():
            for g, ids, mask, rb, rt, tgt in batches:
                if mode == "full":
                    logits = model(input_ids=ids, attention_mask=mask).logits
                    logp = torch.log_softmax(logits[rb, rt].float(), dim=-1)
                else:
                    hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state
                    logp = torch.log_softmax(model.lm_head(hidden[rb, rt]).float(), dim=-1)
                per = logp.gather(-1, tgt[:, None])[:, 0]
                k = 0
                for b, i in enumerate(g):
                    n = len(pairs[i]["ids"]) - pairs[i]["target_start"]
                    means[i] = per[k : k + n].mean().item()
                    k += n
        return means

    for _ in range(args.warmup):
        once()
    t = time.perf_counter()
    for _ in range(args.iters):
        means = once()
    per_pass = (time.perf_counter() - t) / args.iters
    tokens = sum(len(p["ids"]) for p in pairs)
    return {
        "engine": f"pytorch-{mode}",
        "threads": torch.get_num_threads(),
        "seconds_per_pass": per_pass,
        "tokens_per_s": tokens / per_pass,
        "mean_loglik": sum(means.values()) / len(means),
    }


def bench_hopscore(args, pairs_path):
    cmd = [
        args.hopscore, "bench-loglik", "--model", str(Path(*require_smollm2())),
        "--pairs", str(pairs_path), "--max-batch-tokens", str(args.max_batch_tokens),
        "--warmup", str(args.warmup), "--iters", str(args.iters),
        "--threads", str(args.threads), "--json",
    ]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"hopscore failed ({' '.join(cmd)}):\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=64)
    ap.add_argument("--max-batch-tokens", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--hopscore", help="hopscore binary (omit: PyTorch only)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    wdir, gguf = require_smollm2()

    offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(wdir), gguf_file=gguf)
    model = AutoModelForCausalLM.from_pretrained(str(wdir), gguf_file=gguf, dtype=torch.float32)
    model.eval()
    pairs = build_pairs(tok, args.pairs)
    tokens = sum(len(p["ids"]) for p in pairs)
    targets = sum(len(p["ids"]) - p["target_start"] for p in pairs)

    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        pairs_path = Path(tmp) / "pairs.json"
        pairs_path.write_text(json.dumps({"pairs": pairs}))
        for _ in range(args.rounds):
            one = []
            if args.hopscore:
                one.append(bench_hopscore(args, pairs_path))
            one.append(bench_pytorch(args, model, pairs, "full"))
            one.append(bench_pytorch(args, model, pairs, "targets"))
            rounds.append(one)
    # Per engine, the round with the median throughput.
    results = []
    for k in range(len(rounds[0])):
        runs = sorted((r[k] for r in rounds), key=lambda r: r["tokens_per_s"])
        best = dict(runs[len(runs) // 2])
        best["rounds_tokens_per_s"] = [round(r[k]["tokens_per_s"], 1) for r in rounds]
        results.append(best)
    if args.json:
        for r in results:
            print(json.dumps(r))
        return 0
    print(
        f"SmolLM2-135M-Instruct (GGUF Q4_1 → f32), {len(pairs)} pairs, {tokens} tokens ({targets} scored), "
        f"batches ≤ {args.max_batch_tokens} tokens, {args.iters} passes (+{args.warmup} warm-up) × "
        f"{args.rounds} interleaved rounds (median shown), "
        f"threads {args.threads}, cpu {platform.processor() or platform.machine()}"
    )
    base = {r["engine"]: r["tokens_per_s"] for r in results}
    print(f"{'engine':<16} {'s/pass':>8} {'tokens/s':>10} {'mean loglik':>12} {'hopscore ×':>11}  rounds (tokens/s)")
    for r in results:
        ratio = base.get("hopscore", float("nan")) / r["tokens_per_s"]
        print(
            f"{r['engine']:<16} {r['seconds_per_pass']:>8.3f} {r['tokens_per_s']:>10.0f} "
            f"{r['mean_loglik']:>12.5f} {ratio:>11.2f}  {r['rounds_tokens_per_s']}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
