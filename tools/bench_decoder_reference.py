#!/usr/bin/env python3
"""CPU throughput of LEPUS log-likelihood scoring: hopscore vs PyTorch (HF transformers)
and llama.cpp (llama-cpp-python).

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
  the rows that predict target tokens (the same work split hopscore uses);
- ``pytorch-compile`` (``--device cuda`` only; ``--no-compile`` skips it): ``pytorch-targets``
  with the decoder body under ``torch.compile(dynamic=True)`` (inductor), compiled
  during the warm-up pass, so the timed passes run the compiled graphs.
``llama-cpp`` (when llama-cpp-python is installed; ``--no-llama-cpp`` skips it) runs
the GGUF as llama.cpp does — its quantised blocks (Q4_1 here) multiplied with Q8
activations — through its C API (``llama_decode``): one pair per decode (a fresh KV
cache, all prompt tokens in one batch), logits asked only for the rows that predict
target tokens (its best case; the high-level ``Llama.eval`` computes every row's
vocabulary logits), ``n_threads`` and ``n_threads_batch`` = ``--threads``.
``--cpu-gemm f32,bf16,q8,int8`` adds a hopscore row per dense-layer arithmetic
(``hopscore bench-loglik --cpu-gemm``). On the CPU every engine's per-token |Δ log p|
against ``pytorch-targets`` (HF on the dequantised f32 weights) is printed.

Throughput is real (unpadded) prompt + target tokens per second of wall clock
(``time.perf_counter``), mean over the timed passes. The table also prints each
engine's mean per-pair log-likelihood: they must agree to about 1e-4.

GPU mode (``--device cuda``, bf16 by default; ``--dtype f32|f16|bf16``): random weights
in a real shape (``--shape smollm2``: SmolLM2-135M, Llama with GQA 9/3 heads, 30
layers, tied head; ``--shape gpt2``: GPT-2 124M), drawn once with HF's initialisation
(seed ``--seed``) and saved as an HF directory (config.json, model.safetensors) that
both engines load, so that both run the same weights in the same dtype. PyTorch runs
with ``attn_implementation="sdpa"`` on the GPU (``torch.cuda.synchronize()`` around
the timing); hopscore runs ``bench-loglik --device cuda --dtype D --scores``. The
tokenizer is SmolLM2's (from ``--gguf``: a GGUF file whose metadata holds it; the tensors
are not read, so a metadata-only copy made by ``tools/gpu/pack.sh`` serves); GPT-2's
shape keeps its 50257-row vocabulary, of which the SmolLM2 ids use the first 49152.
Besides throughput it reports, per engine, the max and mean per-token |Δ log p|
against an f32 PyTorch reference on the same GPU, and between the two engines.

    # on a GPU machine (see tools/gpu/README.md for the whole session)
    python3 tools/bench_decoder_reference.py --device cuda --shape smollm2 \
        --pairs 50 --all-passages --hopscore target/release/hopscore

``--all-passages`` scores every passage of each question (as LEPUS's first hop does)
instead of one gold passage; ``--data-dir`` names the folder of the HotpotQA sample
(default: ``data/`` in the checkout, or ``$HOPSCORE_DATA``).
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
from common import DATA_DIR, hotpot_rows, lepus_prompt, offline, require_smollm2  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_device import cpu_label, torch_label  # noqa: E402

# Random-weight shapes of --device cuda (transformers config classes and fields).
SHAPES = {
    "smollm2": ("LlamaConfig", dict(
        vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
        num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    )),
    "gpt2": ("GPT2Config", dict(
        vocab_size=50257, n_embd=768, n_layer=12, n_head=12, n_positions=1024,
    )),
    # SmolLM2's vocabulary (its tokenizer) on a body of seconds in an emulator dry run.
    "small": ("LlamaConfig", dict(
        vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=8192,
        rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        bos_token_id=1, eos_token_id=2,
    )),
}


def build_pairs(tok, n, all_passages=False, data_dir=DATA_DIR):
    """LEPUS prompt + question ids of the first `n` questions: the first gold passage
    of each, or with `all_passages` every passage."""
    pairs = []
    for r in hotpot_rows(data_dir)[:n]:
        gold = {t for t, _ in r["supporting_facts"]}
        passages = r["context"] if all_passages else [next(c for c in r["context"] if c[0] in gold)]
        ti = tok(" " + r["question"], add_special_tokens=False)["input_ids"]
        for title, sents in passages:
            pi = tok(lepus_prompt(title, sents), add_special_tokens=False)["input_ids"]
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


def bench_pytorch(args, model, pairs, mode, engine=None):
    """Times `model` over the pairs; returns the result row and the last pass's per-token
    log-probabilities (a list per pair). `mode` "compile" is "targets" with the decoder
    body under `torch.compile` (compiled during the warm-up passes)."""
    import torch

    device = next(model.parameters()).device
    # base_model: `model` of Llama, `transformer` of GPT-2.
    body = torch.compile(model.base_model, dynamic=True) if mode == "compile" else model.base_model
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

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
        tensors = (ids, mask, torch.tensor(rows_b), torch.tensor(rows_t), torch.tensor(tgt))
        batches.append((g, *(t.to(device) for t in tensors)))

    def once():
        tokens = {}
        with torch.inference_mode():
            for g, ids, mask, rb, rt, tgt in batches:
                if mode == "full":
                    logits = model(input_ids=ids, attention_mask=mask).logits
                    logp = torch.log_softmax(logits[rb, rt].float(), dim=-1)
                else:
                    hidden = body(input_ids=ids, attention_mask=mask).last_hidden_state
                    logp = torch.log_softmax(model.get_output_embeddings()(hidden[rb, rt]).float(), dim=-1)
                per = logp.gather(-1, tgt[:, None])[:, 0].cpu().tolist()
                k = 0
                for b, i in enumerate(g):
                    n = len(pairs[i]["ids"]) - pairs[i]["target_start"]
                    tokens[i] = per[k : k + n]
                    k += n
        return [tokens[i] for i in range(len(pairs))]

    # A compiled body is never timed compiling.
    for _ in range(max(args.warmup, mode == "compile")):
        once()
    sync()
    t = time.perf_counter()
    for _ in range(args.iters):
        logprobs = once()
    sync()
    per_pass = (time.perf_counter() - t) / args.iters
    tokens = sum(len(p["ids"]) for p in pairs)
    return {
        "engine": engine or f"pytorch-{mode}",
        "device": torch_label(torch, device),
        "threads": torch.get_num_threads(),
        "seconds_per_pass": per_pass,
        "tokens_per_s": tokens / per_pass,
        "mean_loglik": mean_of_means(logprobs),
    }, logprobs


PYTORCH_MODES = ("full", "targets")


def mean_of_means(logprobs):
    return sum(sum(lp) / len(lp) for lp in logprobs) / len(logprobs)


def token_diff(a, b):
    """(max, mean) per-token |a - b| over two per-pair log-probability lists."""
    d = [abs(x - y) for la, lb in zip(a, b, strict=True) for x, y in zip(la, lb, strict=True)]
    return max(d), sum(d) / len(d)


def bench_llama_cpp(args, gguf_path, pairs):
    """Times llama.cpp over the pairs (targets-only logits); returns the result row and
    the last pass's per-token log-probabilities."""
    import ctypes

    import llama_cpp as lc
    import numpy as np

    longest = max(len(p["ids"]) for p in pairs)
    mparams = lc.llama_model_default_params()
    model = lc.llama_model_load_from_file(str(gguf_path).encode(), mparams)
    cparams = lc.llama_context_default_params()
    cparams.n_ctx = cparams.n_batch = cparams.n_ubatch = longest
    cparams.n_threads = cparams.n_threads_batch = args.threads
    ctx = lc.llama_init_from_model(model, cparams)
    n_vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(model))
    batch = lc.llama_batch_init(longest, 0, 1)

    def score(p):
        ids, start = p["ids"], p["target_start"]
        lc.llama_memory_clear(lc.llama_get_memory(ctx), True)
        for i, t in enumerate(ids):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = t, i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = start - 1 <= i < len(ids) - 1
        batch.n_tokens = len(ids)
        if lc.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        out = []
        for i in range(start - 1, len(ids) - 1):
            row = np.ctypeslib.as_array(
                ctypes.cast(lc.llama_get_logits_ith(ctx, i), ctypes.POINTER(ctypes.c_float)), shape=(n_vocab,)
            ).astype(np.float64)
            top = row.max()
            out.append(float(row[ids[i + 1]] - top - np.log(np.exp(row - top).sum())))
        return out

    try:
        for _ in range(args.warmup):
            [score(p) for p in pairs]
        t = time.perf_counter()
        for _ in range(args.iters):
            logprobs = [score(p) for p in pairs]
        per_pass = (time.perf_counter() - t) / args.iters
    finally:
        lc.llama_batch_free(batch)
        lc.llama_free(ctx)
        lc.llama_model_free(model)
    tokens = sum(len(p["ids"]) for p in pairs)
    return {
        "engine": "llama-cpp",
        "device": cpu_label(),
        "threads": args.threads,
        "seconds_per_pass": per_pass,
        "tokens_per_s": tokens / per_pass,
        "mean_loglik": mean_of_means(logprobs),
    }, logprobs


def have_llama_cpp():
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        return False
    return True


def bench_hopscore(args, model_path, pairs_path, gemm="f32"):
    """Runs `hopscore bench-loglik`; returns its JSON line and per-token log-probs."""
    scores = pairs_path.with_name(f"hopscore_scores_{gemm}.json")
    cmd = [
        args.hopscore, "bench-loglik", "--model", str(model_path),
        "--pairs", str(pairs_path), "--max-batch-tokens", str(args.max_batch_tokens),
        "--warmup", str(args.warmup), "--iters", str(args.iters),
        "--threads", str(args.threads), "--json", "--scores", str(scores),
    ]
    if args.device == "cuda":
        cmd += ["--device", "cuda", "--gpu", str(args.gpu), "--dtype", args.dtype]
    else:
        cmd += ["--cpu-gemm", gemm]
    env = dict(os.environ, RAYON_NUM_THREADS=str(args.threads), OMP_NUM_THREADS=str(args.threads))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"hopscore failed ({' '.join(cmd)}):\n{proc.stderr}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["engine"] = "hopscore" if gemm == "f32" else f"hopscore-{gemm}"
    return row, json.loads(scores.read_text())["logprobs"]


def random_model_dir(args, torch, out):
    """Random weights in `args.shape`, saved (f32) as an HF directory in `out`."""
    import transformers

    cls, fields = SHAPES[args.shape]
    config = getattr(transformers, cls)(**fields)
    torch.manual_seed(args.seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    return out


def load_on(torch, path, device, dtype):
    """The HF model of `path` on `device` in `dtype`, sdpa attention on cuda."""
    from transformers import AutoModelForCausalLM

    attn = "sdpa" if device == "cuda" else None
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation=attn)
    return model.to(device).eval()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=64, help="questions (one pair each, or one per passage)")
    ap.add_argument("--all-passages", action="store_true")
    ap.add_argument("--data-dir", type=Path, default=DATA_DIR)
    ap.add_argument("--max-batch-tokens", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--dtype", choices=("f32", "bf16", "f16"), help="cuda only (default bf16)")
    ap.add_argument("--shape", choices=SHAPES, help="cuda only: random weights (default smollm2)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf", type=Path, help="SmolLM2 GGUF for the tokenizer (and, on cpu, the model)")
    ap.add_argument("--hopscore", help="hopscore binary (omit: PyTorch only)")
    ap.add_argument("--cpu-gemm", default="f32", help="cpu: hopscore rows, a comma list of f32,bf16,q8,int8")
    ap.add_argument("--no-llama-cpp", dest="llama_cpp", action="store_false",
                    help="cpu: skip llama.cpp (run when llama-cpp-python is installed)")
    ap.add_argument("--no-compile", dest="compile", action="store_false",
                    help="cuda: skip the pytorch-compile row (torch.compile of the decoder body)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    cuda = args.device == "cuda"
    if not cuda and (args.dtype or args.shape):
        ap.error("--dtype and --shape are for --device cuda (the CPU runs the SmolLM2 GGUF in f32)")
    args.dtype = args.dtype or ("bf16" if cuda else "f32")
    args.shape = args.shape or "smollm2"
    wdir, gguf = (args.gguf.parent, args.gguf.name) if args.gguf else require_smollm2()

    offline()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # tools/gpu/run.sh's emulator dry run: PyTorch on the CPU, hopscore on the emulator.
    tdev = "cpu" if os.environ.get("HOPSCORE_REFERENCE_TORCH_CPU") else args.device
    if tdev == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device")
    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(str(wdir), gguf_file=gguf)
    pairs = build_pairs(tok, args.pairs, args.all_passages, args.data_dir)
    tokens = sum(len(p["ids"]) for p in pairs)
    targets = sum(len(p["ids"]) - p["target_start"] for p in pairs)
    torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]

    rounds, diffs, vs_llama = [], {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        pairs_path = Path(tmp) / "pairs.json"
        pairs_path.write_text(json.dumps({"pairs": pairs}))
        if cuda:
            model_path = random_model_dir(args, torch, Path(tmp) / "model")
            reference = load_on(torch, model_path, tdev, torch.float32)
            _, ref_lp = bench_pytorch(dict_args(args, warmup=0, iters=1), reference, pairs, "targets")
            del reference
            torch.cuda.empty_cache()
            model = load_on(torch, model_path, tdev, torch_dtype)
        else:
            model_path = wdir / gguf
            model = AutoModelForCausalLM.from_pretrained(str(wdir), gguf_file=gguf, dtype=torch.float32)
            model.eval()
            ref_lp = None
        for _ in range(args.rounds):
            one, lps = [], {}
            if args.hopscore:
                for gemm in (["f32"] if cuda else args.cpu_gemm.split(",")):
                    row, lps[row_name(gemm)] = bench_hopscore(args, model_path, pairs_path, gemm)
                    one.append(row)
            if not cuda and args.llama_cpp and have_llama_cpp():
                row, lps["llama-cpp"] = bench_llama_cpp(args, model_path, pairs)
                one.append(row)
            for mode in PYTORCH_MODES + (("compile",) if tdev == "cuda" and args.compile else ()):
                row, lps[f"pytorch-{mode}"] = bench_pytorch(args, model, pairs, mode)
                one.append(row)
            rounds.append(one)
        if ref_lp is None:
            # On the CPU the reference is HF on the dequantised f32 weights.
            ref_lp = lps["pytorch-targets"]
        diffs = {name: token_diff(lp, ref_lp) for name, lp in lps.items()}
        if "hopscore" in lps:
            diffs["hopscore vs pytorch-targets"] = token_diff(lps["hopscore"], lps["pytorch-targets"])
        # How closely each engine follows llama.cpp's own arithmetic on the same blocks.
        vs_llama = {
            name: token_diff(lp, lps["llama-cpp"])
            for name, lp in lps.items()
            if "llama-cpp" in lps and name != "llama-cpp"
        }
    # Per engine, the round with the median throughput.
    results = []
    for k in range(len(rounds[0])):
        runs = sorted((r[k] for r in rounds), key=lambda r: r["tokens_per_s"])
        best = dict(runs[len(runs) // 2])
        best["rounds_tokens_per_s"] = [round(r[k]["tokens_per_s"], 1) for r in rounds]
        best["max_abs_dlogp_vs_f32"], best["mean_abs_dlogp_vs_f32"] = diffs.get(best["engine"], (None, None))
        results.append(best)
    for r in results:
        r["max_abs_dlogp_vs_llama_cpp"], r["mean_abs_dlogp_vs_llama_cpp"] = vs_llama.get(r["engine"], (None, None))
    if args.json:
        for r in results:
            print(json.dumps(r))
        if "hopscore vs pytorch-targets" in diffs:
            m, a = diffs["hopscore vs pytorch-targets"]
            print(json.dumps({"compare": "hopscore vs pytorch-targets", "max_abs_dlogp": m, "mean_abs_dlogp": a}))
        return 0
    where = (
        f"random {args.shape} weights, {args.dtype} on "
        f"{torch.cuda.get_device_name(args.gpu) if tdev == 'cuda' else 'cpu (emulator dry run)'}"
        if cuda
        else f"SmolLM2-135M-Instruct (GGUF Q4_1), threads {args.threads}, "
        f"cpu {platform.processor() or platform.machine()}"
    )
    print(
        f"{where}; {len(pairs)} pairs, {tokens} tokens ({targets} scored), "
        f"batches ≤ {args.max_batch_tokens} tokens, {args.iters} passes (+{args.warmup} warm-up) × "
        f"{args.rounds} interleaved rounds (median shown)"
    )
    base = {r["engine"]: r["tokens_per_s"] for r in results}
    print(f"{'engine':<16} {'s/pass':>8} {'tokens/s':>10} {'mean loglik':>12} {'hopscore ×':>11}"
          f"  {'max|Δlogp| vs ' + ('f32' if cuda else 'HF f32'):>18} {'mean':>10}  rounds (tokens/s)")
    for r in results:
        ratio = base.get("hopscore", float("nan")) / r["tokens_per_s"]
        d = f"  {r['max_abs_dlogp_vs_f32']:>18.3e} {r['mean_abs_dlogp_vs_f32']:>10.3e}"
        print(
            f"{r['engine']:<16} {r['seconds_per_pass']:>8.3f} {r['tokens_per_s']:>10.0f} "
            f"{r['mean_loglik']:>12.5f} {ratio:>11.2f}{d}  {r['rounds_tokens_per_s']}"
        )
    if "hopscore vs pytorch-targets" in diffs:
        m, a = diffs["hopscore vs pytorch-targets"]
        print(f"per-token |Δ log p|, hopscore vs pytorch-targets ({args.dtype}): max {m:.3e}, mean {a:.3e}")
    for name, (m, a) in vs_llama.items():
        print(f"per-token |Δ log p|, {name} vs llama-cpp: max {m:.3e}, mean {a:.3e}")
    return 0


def row_name(gemm):
    """The engine name of hopscore with `--cpu-gemm gemm`."""
    return "hopscore" if gemm == "f32" else f"hopscore-{gemm}"


def dict_args(args, **over):
    """A copy of the parsed arguments with some fields replaced."""
    return argparse.Namespace(**{**vars(args), **over})


if __name__ == "__main__":
    sys.exit(main())
