#!/usr/bin/env python3
"""Throughput of LEPUS scoring with a T5 encoder-decoder: hopscore vs PyTorch, on the
CPU or on a GPU.

Both engines load the same random weights in a real T5 shape (``--shape large``:
T5-large v1.1 / LM-adapt, 24 + 24 blocks, d_model 1024, 16 heads of 64, gated-GELU
d_ff 2816, 32128-word untied head, 738M parameters in f32; ``--shape small``: the
v1.1 small shape, 8 + 8 blocks of d_model 512) and score the same token ids: LEPUS
first-hop prompts built from HotpotQA dev (every passage of each question under
hopscore's first template; the prompt is the encoder input, the question with
``</s>`` the labels, as the official T5 branch scores them), tokenised with the T5-style
tokenizer of tests/fixtures/t5 (its 800 ids index the first rows of the 32128-word
embedding). No T5 weights can be fetched here; the speed of a forward does not
depend on the values.

    cargo build --release
    python3 tools/bench_t5_reference.py --hopscore target/release/hopscore --threads 2

PyTorch (HF transformers ``T5ForConditionalGeneration``, f32, ``torch.inference_mode``,
the same thread count) scores each token-budget batch as ``score_prompt_batch``
does: encoder inputs padded with an attention mask, labels padded with -100, then the
log-softmax of the logits gathered at the labels. Both engines group the length-sorted
pairs into the same batches of at most ``--max-batch-tokens`` real tokens (encoder
plus labels). Throughput is real tokens per second of wall clock, mean over
``--iters`` passes after ``--warmup``; ``--rounds`` interleaves the engines and reports
each one's median round. The table ends with the per-token |Δ log p| between the
engines (f32 against f32).

GPU mode (``--device cuda``, bf16 by default; ``--dtype f32|bf16|f16``): both engines
run on the GPU in that dtype (PyTorch: the model cast and moved there, eager attention
as T5 has it, ``torch.cuda.synchronize()`` around the timing; hopscore:
``bench-loglik --device cuda --dtype D``), and each engine's per-token |Δ log p| is
taken against PyTorch in f32 on the same GPU. ``HOPSCORE_REFERENCE_TORCH_CPU=1`` keeps
PyTorch on the CPU (the emulator dry run of tools/gpu/run.sh).

    python3 tools/bench_t5_reference.py --device cuda --shape large --questions 50 \
        --hopscore target/release/hopscore
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent / "goldens"))
from bench_decoder_reference import bench_hopscore, groups, mean_of_means, token_diff  # noqa: E402
from common import DATA_DIR, FIXTURES, hotpot_rows, offline  # noqa: E402
from bench_device import hopscore_label, torch_label  # noqa: E402

offline()

SHAPES = {
    "large": dict(d_model=1024, d_kv=64, d_ff=2816, num_layers=24, num_heads=16),
    "small": dict(d_model=512, d_kv=64, d_ff=1024, num_layers=8, num_heads=6),
}
TEMPLATE = ("Document: <P> Review the previous document and ask a question to which the "
            "document provides the answer. Question:")


def build_pairs(tok, n, max_prompt, data_dir):
    """Every passage of the first `n` questions as a single-document prompt."""
    from make_lepus_goldens import render

    pairs = []
    for r in hotpot_rows(data_dir)[:n]:
        question = r["question"] if r["question"].endswith("?") else r["question"] + "?"
        labels = tok(question)["input_ids"]
        for _, sents in r["context"]:
            enc = tok(render(TEMPLATE, ["".join(sents)]), max_length=max_prompt, truncation=True)["input_ids"]
            pairs.append({"ids": enc + labels, "target_start": len(enc)})
    return pairs


def random_model_dir(shape, seed, out):
    """Random f32 weights (HF's initialisation) with an untied head, saved as the
    v1.1 checkpoints are (config.json with tie_word_embeddings false, safetensors)."""
    import torch
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForConditionalGeneration

    fields = dict(SHAPES[shape], vocab_size=32128, feed_forward_proj="gated-gelu",
                  decoder_start_token_id=0, pad_token_id=0, eos_token_id=1, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(T5Config(**fields))
    model.lm_head = torch.nn.Linear(fields["d_model"], fields["vocab_size"], bias=False)
    model.config.scale_decoder_outputs = False
    model.eval()
    state = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("embed_tokens.weight")}
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
              "num_decoder_layers": fields["num_layers"], "relative_attention_num_buckets": 32,
              "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6, **fields}
    (out / "config.json").write_text(json.dumps(config, indent=1))
    return model


def bench_pytorch(args, model, pairs, engine="pytorch"):
    import torch

    device = next(model.parameters()).device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    batches = []
    for g in groups(pairs, args.max_batch_tokens):
        le = max(pairs[i]["target_start"] for i in g)
        ll = max(len(pairs[i]["ids"]) - pairs[i]["target_start"] for i in g)
        enc = torch.zeros(len(g), le, dtype=torch.long)
        mask = torch.zeros(len(g), le, dtype=torch.long)
        labels = torch.full((len(g), ll), -100, dtype=torch.long)
        for b, i in enumerate(g):
            p, s = pairs[i]["ids"], pairs[i]["target_start"]
            enc[b, :s] = torch.tensor(p[:s])
            mask[b, :s] = 1
            labels[b, : len(p) - s] = torch.tensor(p[s:])
        batches.append((g, enc.to(device), mask.to(device), labels.to(device)))

    def once():
        out = {}
        with torch.inference_mode():
            for g, enc, mask, labels in batches:
                logits = model(input_ids=enc, attention_mask=mask, labels=labels).logits
                logp = torch.log_softmax(logits.float(), dim=-1)
                per = logp.gather(-1, labels.clamp(min=0)[..., None])[..., 0].cpu()
                for b, i in enumerate(g):
                    n = len(pairs[i]["ids"]) - pairs[i]["target_start"]
                    out[i] = per[b, :n].tolist()
        return [out[i] for i in range(len(pairs))]

    for _ in range(args.warmup):
        once()
    sync()
    t = time.perf_counter()
    for _ in range(args.iters):
        logprobs = once()
    sync()
    per_pass = (time.perf_counter() - t) / args.iters
    tokens = sum(len(p["ids"]) for p in pairs)
    return {"engine": engine, "device": torch_label(torch, device), "threads": torch.get_num_threads(),
            "seconds_per_pass": per_pass,
            "tokens_per_s": tokens / per_pass, "mean_loglik": mean_of_means(logprobs)}, logprobs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hopscore", help="hopscore binary (omit to run PyTorch only)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="large")
    ap.add_argument("--questions", type=int, default=2, help="questions (each gives its 10 passages)")
    ap.add_argument("--max-prompt-tokens", type=int, default=600)
    ap.add_argument("--max-batch-tokens", type=int, default=4096)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=("f32", "bf16", "f16"), help="cuda only (default bf16)")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cuda = args.device == "cuda"
    if not cuda and args.dtype:
        ap.error("--dtype is for --device cuda (the CPU path runs f32)")
    args.dtype = args.dtype or ("bf16" if cuda else "f32")

    import torch
    from transformers import PreTrainedTokenizerFast

    torch.set_num_threads(args.threads)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(FIXTURES / "t5" / "v1_1" / "tokenizer.json"),
                                  eos_token="</s>", pad_token="<pad>", unk_token="<unk>")
    pairs = build_pairs(tok, args.questions, args.max_prompt_tokens, args.data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        model = random_model_dir(args.shape, args.seed, tmp)
        pairs_path = tmp / "pairs.json"
        pairs_path.write_text(json.dumps({"pairs": pairs}))
        ref_lp = None
        if cuda:  # the f32 reference on the same device, then the timed model in --dtype
            tdev = "cpu" if os.environ.get("HOPSCORE_REFERENCE_TORCH_CPU") else "cuda"
            model = model.to(tdev)
            _, ref_lp = bench_pytorch(argparse.Namespace(**{**vars(args), "warmup": 0, "iters": 1}), model, pairs)
            model = model.to({"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype])
        rounds = {"pytorch": [], "hopscore": []}
        for _ in range(args.rounds):
            row, torch_lp = bench_pytorch(args, model, pairs)
            rounds["pytorch"].append(row)
            if args.hopscore:
                row, hop_lp = bench_hopscore(args, tmp, pairs_path)
                rounds["hopscore"].append(row)
    rows = []
    for engine, rs in rounds.items():
        if rs:
            best = sorted(rs, key=lambda r: r["tokens_per_s"])[len(rs) // 2]
            rows.append({**best, "engine": engine, "rounds": [r["tokens_per_s"] for r in rs]})
    tokens = sum(len(p["ids"]) for p in pairs)
    labels = sum(len(p["ids"]) - p["target_start"] for p in pairs)
    meta = {"shape": args.shape, "pairs": len(pairs), "tokens": tokens, "label_tokens": labels,
            "threads": args.threads, "cpu": platform.processor() or platform.machine(),
            "device": hopscore_label(args.device, args.gpu), "dtype": args.dtype, "torch": torch.__version__}
    if cuda:
        meta["gpu"] = torch.cuda.get_device_name(args.gpu) if torch.cuda.is_available() else "emulator"
        meta["pytorch_vs_f32"] = token_diff(ref_lp, torch_lp)
    if args.hopscore:
        meta["max_abs_dlogp"], meta["mean_abs_dlogp"] = token_diff(torch_lp, hop_lp)
        meta["speedup"] = rows[1]["tokens_per_s"] / rows[0]["tokens_per_s"]
        if cuda:
            meta["hopscore_vs_f32"] = token_diff(ref_lp, hop_lp)
    if args.json:
        print(json.dumps({"meta": meta, "rows": rows}))
        return
    where = f"{meta['gpu']}, {args.dtype}" if cuda else f"{args.threads} threads"
    print(f"T5-{args.shape} LEPUS scoring, {len(pairs)} pairs, {tokens} tokens ({labels} labels), {where}")
    print(f"{'engine':<10} {'s/pass':>9} {'tokens/s':>10} {'mean loglik':>12}  rounds")
    for r in rows:
        print(f"{r['engine']:<10} {r['seconds_per_pass']:>9.2f} {r['tokens_per_s']:>10.1f} "
              f"{r['mean_loglik']:>12.5f}  {', '.join(f'{x:.1f}' for x in r['rounds'])}")
    if args.hopscore:
        print(f"hopscore / pytorch: {meta['speedup']:.2f}x; per-token |Δ log p| max "
              f"{meta['max_abs_dlogp']:.1e}, mean {meta['mean_abs_dlogp']:.1e}")
    for engine in ("pytorch", "hopscore") if cuda else ():
        if f"{engine}_vs_f32" in meta:
            m, a = meta[f"{engine}_vs_f32"]
            print(f"{engine} {args.dtype} vs pytorch f32: per-token |Δ log p| max {m:.1e}, mean {a:.1e}")


if __name__ == "__main__":
    main()
