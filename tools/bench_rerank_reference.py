#!/usr/bin/env python3
"""`hopscore rerank` next to what a CPU user would pick instead — sentence-transformers'
`CrossEncoder.predict` (PyTorch) and ONNX Runtime — on the same (question, passage)
pairs, in one run, same threads; pairs/s, the median of several interleaved rounds.

    cargo build --release
    python3 tools/bench_rerank_reference.py --hopscore target/release/hopscore \\
        [--shapes minilm-l6,xlmr-base] [--threads 2] [--rounds 3] [--repeat 2] \\
        [--max-length 256] [--batch-size 32] [--keep DIR] [--json]

Models: seeded random checkpoints (HF's initialisation; throughput does not depend on
the values, accuracy is tested on the goldens of tests/reranker_parity.rs) of

    minilm-l6  cross-encoder/ms-marco-MiniLM-L-6-v2's shape: BertForSequenceClassification,
               6 layers, hidden 384, 12 heads, ffn 1,536, 1 label
    xlmr-base  BAAI/bge-reranker-base's shape: XLMRobertaForSequenceClassification,
               12 layers, hidden 768, 12 heads, ffn 3,072, 1 label (its 250,002-entry
               embedding table cut to the tokenizer's 30,522: the lookup does not change
               the per-pair work; the tokenizer gives it no segment ids, as XLM-R's)

with all-MiniLM-L6-v2's real WordPiece tokenizer (weights/all-minilm-l6-v2,
tools/fetch_minilm.sh, or `--tokenizer-dir`) for both. Pairs: the HotpotQA slice's questions with each of
their passages (title + " " + text), `--repeat` times over, truncated longest-first at
`--max-length` tokens. Engines (each its own way of batching, as its users run it):

    hopscore    `hopscore rerank` over the question file (packed by token budget, no
                padding), timed end to end less a 1-question run (model load, Parquet
                writing of the files, process start)
    st          CrossEncoder(max_length).predict(pairs, batch_size), batches in input
                order padded to their longest pair (tokenisation included)
    ort         the same model exported to ONNX (opset 17, dynamic batch and length),
                InferenceSession with ORT_ENABLE_ALL, batches as st's (tokenisation
                by the fast tokenizer included)

On `--device cuda` hopscore runs `--device cuda --dtype D` and st the model in D on the
GPU (transformers' sdpa attention, as TEI-style PyTorch serving runs it); ort is CPU-only
here (leave it out with `--engines`). The table gives pairs/s (median round), each
engine's ratio to st, and the largest |Δ score| of hopscore and ort against st (sigmoid
scores).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_device import hopscore_label, torch_label  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
MINILM = REPO / "weights" / "all-minilm-l6-v2"
SLICE = REPO / "tests" / "fixtures" / "data" / "hotpot_dev_distractor_slice.json.gz"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")

SHAPES = {
    "minilm-l6": ("BertForSequenceClassification", "BertConfig",
                  dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536,
                       max_position_embeddings=512)),
    "xlmr-base": ("XLMRobertaForSequenceClassification", "XLMRobertaConfig",
                  dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                       max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
                       eos_token_id=2, layer_norm_eps=1e-5)),
}


def make_model(shape: str, folder: Path, seed: int, tokenizer_dir: Path) -> Path:
    """The seeded random checkpoint of `shape` with the MiniLM tokenizer, made once."""
    import torch
    import transformers

    out = folder / shape
    if (out / "model.safetensors").is_file():
        return out
    cls_name, config_name, extra = SHAPES[shape]
    torch.manual_seed(seed)
    config = getattr(transformers, config_name)(vocab_size=30522, num_labels=1, **extra)
    model = getattr(transformers, cls_name)(config).eval()
    model.save_pretrained(out)
    for name in TOKENIZER_FILES:
        if (tokenizer_dir / name).is_file():
            shutil.copy(tokenizer_dir / name, out / name)
    if config.model_type != "bert":
        # XLM-R has one token type: its tokenizer gives the model no segment ids.
        path = out / "tokenizer_config.json"
        tok_config = json.loads(path.read_text()) if path.is_file() else {}
        tok_config["model_input_names"] = ["input_ids", "attention_mask"]
        path.write_text(json.dumps(tok_config, indent=1))
    return out


def question_file(hopscore: str, folder: Path, repeat: int) -> tuple[Path, Path, list[tuple[str, str]]]:
    """The slice imported `repeat` times over (ids made unique), a one-question file, and
    the pairs in file order."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    base = folder / "slice.parquet"
    subprocess.run([hopscore, "import", "hotpotqa", str(SLICE), "-o", str(base)], check=True,
                   stderr=subprocess.DEVNULL)
    table = pq.read_table(base)
    copies = [table.set_column(table.schema.get_field_index("id"), "id",
                               pc.binary_join_element_wise(table["id"], pa.scalar(f"~{k}"), ""))
              for k in range(repeat)]
    full = pa.concat_tables(copies)
    path, one = folder / "questions.parquet", folder / "one.parquet"
    pq.write_table(full, path)
    pq.write_table(full.slice(0, 1), one)
    pairs = []
    for row in full.to_pylist():
        for p in row["passages"]:
            doc = f"{p['title']} {p['text']}".strip() if p["title"] else p["text"].strip()
            pairs.append((row["question"], doc))
    return path, one, pairs


def batches(pairs, size):
    for i in range(0, len(pairs), size):
        yield pairs[i:i + size]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hopscore", required=True)
    ap.add_argument("--shapes", default="minilm-l6,xlmr-base")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--keep", metavar="DIR", help="folder for the checkpoints and ONNX files (reused)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer-dir", type=Path, default=MINILM)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32")
    ap.add_argument("--engines", default="hopscore,st,ort")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not (args.tokenizer_dir / "tokenizer.json").is_file():
        sys.exit(f"{args.tokenizer_dir}/tokenizer.json missing: run bash tools/fetch_minilm.sh")
    engines = args.engines.split(",")
    if "st" not in engines:
        sys.exit("--engines must hold st (the reference of the ratios)")

    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-rerank-"))
    work.mkdir(parents=True, exist_ok=True)
    questions, one, pairs = question_file(args.hopscore, work, args.repeat)
    rows = []
    for shape in args.shapes.split(","):
        model_dir = make_model(shape, work, args.seed, args.tokenizer_dir)
        tok = AutoTokenizer.from_pretrained(str(model_dir))
        torch_dtype = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[args.dtype]
        # The kit's dry run on the CPU emulator of the driver has no torch GPU.
        st_device = "cpu" if os.environ.get("HOPSCORE_REFERENCE_TORCH_CPU") else args.device
        ce = CrossEncoder(str(model_dir), max_length=args.max_length, device=st_device,
                          model_kwargs={"dtype": torch_dtype})
        onnx_path = model_dir / "model.onnx"
        if "ort" in engines and not onnx_path.is_file():
            hf = ce.model.eval()
            enc = tok([pairs[0][0]], [pairs[0][1]], return_tensors="pt")
            names = list(tok.model_input_names)
            torch.onnx.export(hf, tuple(enc[n] for n in names), str(onnx_path), input_names=names,
                              output_names=["logits"], opset_version=17, dynamo=False,
                              dynamic_axes={n: {0: "batch", 1: "length"} for n in names})
        if "ort" in engines:
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.intra_op_num_threads = args.threads
            so.inter_op_num_threads = 1
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            session = ort.InferenceSession(str(onnx_path), so, providers=["CPUExecutionProvider"])

        def run_st():
            scores = ce.predict(pairs, batch_size=args.batch_size, show_progress_bar=False,
                                convert_to_tensor=True)
            return scores.float().cpu().numpy()

        def run_ort():
            out = []
            for b in batches(pairs, args.batch_size):
                enc = tok([q for q, _ in b], [d for _, d in b], truncation=True, max_length=args.max_length,
                          padding=True, return_tensors="np")
                feed = {k: enc[k].astype(np.int64) for k in tok.model_input_names}
                out.append(session.run(None, feed)[0][:, 0])
            return 1 / (1 + np.exp(-np.concatenate(out)))

        def run_hopscore(inp: Path, out: Path) -> float:
            cmd = [args.hopscore, "--threads", str(args.threads), "rerank", "--model", str(model_dir),
                   "--max-length", str(args.max_length), "--input", str(inp), "--output", str(out),
                   "--device", args.device, "--dtype", args.dtype]
            if out.exists():
                out.unlink()
            t = time.perf_counter()
            subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
            return time.perf_counter() - t

        times = {e: [] for e in engines}
        scores = {}
        for r in range(args.rounds):
            if "hopscore" in engines:
                load = run_hopscore(one, work / "one.out.parquet")
                total = run_hopscore(questions, work / "out.parquet")
                times["hopscore"].append(max(total - load, 1e-9))
            for engine, run in (("st", run_st), ("ort", run_ort)):
                if engine in engines:
                    t = time.perf_counter()
                    scores[engine] = np.asarray(run(), dtype=np.float64)
                    times[engine].append(time.perf_counter() - t)
            print(f"{shape} round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()),
                  file=sys.stderr)
        if "hopscore" in engines:
            # hopscore reorders each pool: its scores back in input order by (question, title).
            by_passage = {}
            for row in pq.read_table(work / "out.parquet").to_pylist():
                for p, s in zip(row["passages"], row["rerank_scores"]):
                    by_passage[(row["id"], p["title"])] = s
            ordered = [by_passage[(row["id"], p["title"])] for row in pq.read_table(questions).to_pylist()
                       for p in row["passages"]]
            scores["hopscore"] = np.asarray(ordered, dtype=np.float64)
        st_rate = len(pairs) / statistics.median(times["st"])
        for engine, ts in times.items():
            rate = len(pairs) / statistics.median(ts)
            rows.append({
                "shape": shape, "engine": engine, "pairs": len(pairs), "threads": args.threads,
                "device": hopscore_label(args.device) if engine == "hopscore" else
                torch_label(torch, "cpu" if engine == "ort" else st_device), "dtype": args.dtype,
                "max_length": args.max_length, "rounds": args.rounds, "pairs_per_s": round(rate, 1),
                "vs_st": round(rate / st_rate, 2),
                "max_abs_diff_vs_st": float(np.max(np.abs(scores[engine] - scores["st"]))),
            })
    if args.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print(f"| shape | engine | pairs/s (median of {args.rounds}) | × st | max abs Δ score vs st |")
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['shape']} | {r['engine']} | {r['pairs_per_s']:,} | {r['vs_st']} | "
                  f"{r['max_abs_diff_vs_st']:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
