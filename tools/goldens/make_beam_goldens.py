#!/usr/bin/env python3
"""Generate goldens for the Beam Retrieval inference loop on real questions.

Run by hand (never in CI), from the repository root:

    python3 tools/goldens/make_beam_goldens.py

Options: ``--out DIR`` (default ``tests/fixtures/beam``), ``--data DIR`` (default
``data/`` in the checkout, or ``$HOPSCORE_DATA``), ``--tokenizer FILE`` (default
``weights/deberta-v3-tokenizer/tokenizer.json``), ``--seed N`` (weights),
``--check`` (recompute everything and compare with the files on disk, writing
nothing).

What it does:

1. Builds a small random Beam Retrieval model (HF ``DebertaV2Model`` v3 encoder with
   the real DeBERTa-v3 vocabulary size 128100, hidden 8, 2 heads, 2 layers, plus the
   two bare ``Linear(8, 2)`` heads ``hop_classifier_layer`` / ``hop_n_classifier_layer``),
   rounds the random weights to bfloat16 and stores them as
   ``<out>/model/model.safetensors`` (bf16, keys ``encoder.*``, ``hop_*``) with
   ``<out>/model/config.json``. The reference runs in fp32 with the rounded values.
2. Tokenises real HotpotQA / MuSiQue questions with the fast tokenizer of
   ``tokenizer.json`` (truncation and padding cleared, no special tokens).
3. Runs a re-implementation of the eval branch of the official
   ``Retriever.forward`` (canghongjian/beam_retriever, retrieval/retriever_model.py)
   with the inputs built as in ``test_model_tmp.py::get_retr_output``, plus the
   edge-case rules of SPEC.md section 1 (n <= hops, fewer candidates than the beam,
   question longer than 510 tokens).
4. Writes ``<out>/goldens.json`` (ids, scores and chains only; no dataset text: the
   Rust test reads the questions from the slices in tests/fixtures/data, which
   tools/goldens/make_data_slices.py cuts to hold every question named here).

Everything runs on CPU, fp32, eval mode; no model hub is contacted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

from common import DEBERTA_V3_ATTENTION, DATA_DIR, DEBERTA_TOKENIZER, FIXTURES, HOTPOT_FILE, MUSIQUE_FILE, file_sha256, offline, read_records

offline()

import numpy as np  # noqa: E402
import safetensors  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch import nn  # noqa: E402

import transformers  # noqa: E402
from transformers import DebertaV2Config  # noqa: E402
from beam_model import BeamRetriever  # noqa: E402

DEFAULT_OUT = FIXTURES / "beam"

PAD_ID, CLS_ID, SEP_ID = 0, 1, 2
MAX_LEN = 512  # max_seq_len of the official Retriever and max_length of the tokenizer calls
BUDGET = MAX_LEN - 2  # room for the tokens between [CLS] and [SEP]

DEFAULT_SEED = 7001
WEIGHT_STD = 0.5
LN_STD = 0.1

MODEL_CONFIG = dict(
    vocab_size=128100,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    hidden_act="gelu",
    hidden_dropout_prob=0.1,
    attention_probs_dropout_prob=0.1,
    max_position_embeddings=512,
    type_vocab_size=0,
    initializer_range=0.02,
    layer_norm_eps=1e-7,
    **DEBERTA_V3_ATTENTION,
    pad_token_id=PAD_ID,
    pooler_hidden_size=8,
    pooler_hidden_act="gelu",
    pooler_dropout=0.0,
)

# Questions used (indices into the sample files, chosen by hand):
# HotpotQA: the first 12 questions (all with 10 paragraphs), plus every question of
# the sample that has fewer than 10 paragraphs except one of the two 2-paragraph
# ones: #33 (6 paragraphs), #147 (4), #587 (9), #137 (2 paragraphs = n <= hops,
# returned unscored).
HOTPOT_B2 = list(range(12)) + [33, 147, 587, 137]
HOTPOT_B3 = [0, 1, 2, 33]
# Beam larger than the candidate pool on the 4-paragraph question: hop 1 has 4 < B
# candidates; hop 2 has 3+2+1+0 = 6 (B=7: fewer than B again; the 4th beam has none).
HOTPOT_BIG = [(147, 5), (147, 7)]
# MuSiQue: every 4hop3 (#0, #10, + the third found at run time), the 3hop2 question,
# 4hop1 #2 #15, 3hop1 #1 #12, and 2hop #3 #4 #5 #6.
MUSIQUE_B2_FIXED = [0, 1, 2, 3, 4, 5, 6, 10, 12, 15]
MUSIQUE_B3 = [0, 1, 2, 3]

N_INPUT_DETAIL = 3  # record full hop-2 inputs for the first 3 questions


# ----------------------------------------------------------------------------------
# model


def make_config() -> DebertaV2Config:
    config = DebertaV2Config(**MODEL_CONFIG)
    config.dtype = torch.bfloat16  # storage dtype, written as "dtype": "bfloat16"
    return config


@torch.no_grad()
def randomize(model: nn.Module, gen: torch.Generator) -> None:
    """Linear/Embedding weights and biases N(0, 0.5); LayerNorm 1+N(0,0.1) / N(0,0.1).

    Modules are visited in named_modules() order: the result depends only on the seed.
    """
    for _, module in model.named_modules():
        if isinstance(module, nn.LayerNorm):
            module.weight.copy_(1.0 + LN_STD * torch.randn(module.weight.shape, generator=gen))
            module.bias.copy_(LN_STD * torch.randn(module.bias.shape, generator=gen))
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.copy_(WEIGHT_STD * torch.randn(module.weight.shape, generator=gen))
            bias = getattr(module, "bias", None)
            if bias is not None:
                bias.copy_(WEIGHT_STD * torch.randn(bias.shape, generator=gen))
    known = set()
    for _, module in model.named_modules():
        if isinstance(module, (nn.LayerNorm, nn.Linear, nn.Embedding)):
            known.update(id(p) for p in module.parameters(recurse=False))
    unknown = [n for n, p in model.named_parameters() if id(p) not in known]
    if unknown:
        raise RuntimeError(f"parameters not covered by randomize(): {unknown}")


def build_model(seed: int):
    config = make_config()
    torch.manual_seed(0)  # the default init is overwritten anyway
    model = BeamRetriever(config)
    gen = torch.Generator().manual_seed(seed)
    randomize(model, gen)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    model.eval()
    return config, model


def state_dict_bf16(model: nn.Module) -> dict:
    return {k: v.detach().to(torch.bfloat16).contiguous().clone() for k, v in model.state_dict().items()}


def reload_model(folder: Path) -> BeamRetriever:
    """Load config.json + model.safetensors the way a user would (strict)."""
    config = DebertaV2Config.from_json_file(str(folder / "config.json"))
    model = BeamRetriever(config)
    sd = {k: v.to(torch.float32) for k, v in load_file(str(folder / "model.safetensors")).items()}
    missing, unexpected = model.load_state_dict(sd, strict=True), None
    del missing, unexpected
    model.eval()
    return model


# ----------------------------------------------------------------------------------
# tokenisation / data


def load_tokenizer(path: Path) -> tokenizers.Tokenizer:
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.no_truncation()
    tok.no_padding()
    return tok


def encode(tok: tokenizers.Tokenizer, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False).ids)


def strip_question(q: str) -> str:
    return q[:-1] if q.endswith("?") else q


def prepare(tok, question: str, passages: list[str]):
    """Token ids as get_retr_output builds them (+ the SPEC cut of the question)."""
    q = encode(tok, strip_question(question))[:BUDGET]
    ctx = [encode(tok, p)[: MAX_LEN - len(q)] for p in passages]
    return q, ctx


def hotpot_passages(sample) -> list[str]:
    return [title + "".join(sentences) for title, sentences in sample["context"]]


def musique_passages(sample) -> list[str]:
    return [p["title"] + "." + p["paragraph_text"] for p in sample["paragraphs"]]


def load_data(data_dir: Path):
    return read_records(data_dir / HOTPOT_FILE), read_records(data_dir / MUSIQUE_FILE)


# ----------------------------------------------------------------------------------
# the beam search


def score_batch(model: BeamRetriever, seqs: list[list[int]], head: str):
    """Right-padded batch `[CLS] seq [SEP] 0…`, mask 1 on [CLS]+seq only (official quirk)."""
    width = max(len(s) for s in seqs) + 2
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for r, s in enumerate(seqs):
        ids[r, 0] = CLS_ID
        ids[r, 1 : len(s) + 1] = torch.tensor(s, dtype=torch.long)
        ids[r, len(s) + 1] = SEP_ID
        mask[r, : len(s) + 1] = 1
    return model.cls_logits(ids, mask, head), width


def topk_rank(scores: torch.Tensor, k: int) -> list[int]:
    _, idx = scores.topk(k, dim=-1)  # sorted, descending (as the official code)
    return [int(i) for i in idx]


def hop_gaps(col1: torch.Tensor, k: int):
    """(selection gap = k-th minus (k+1)-th, order gap = min adjacent gap in top k+1)."""
    s = sorted((float(x) for x in col1), reverse=True)
    sel = s[k - 1] - s[k] if len(s) > k else None
    adj = [s[r] - s[r + 1] for r in range(min(k, len(s) - 1))]
    return sel, (min(adj) if adj else None)


def beam_search(model, q, ctx, hops, beam_size, want_inputs=False):
    n = len(ctx)
    out = {"hops_detail": [], "gaps": []}
    if n <= hops or hops < 1:
        # SPEC edge case: the official code returns list(range(hops)); we return all n.
        out.update(chain=list(range(n)), chain_score=None, beams=[{"chain": list(range(n)), "score": None}],
                   hop1_logits=None, mean_passage_len=None)
        return out
    mpl = (MAX_LEN - 2 - len(q)) // hops

    def budget(idx, prefix_len, z_len):
        return min(MAX_LEN - 2 - (hops - 1 - idx) * mpl, prefix_len + z_len)

    # hop 1: every passage, classifier 1
    seqs = [(q + c)[: budget(0, len(q), len(c))] for c in ctx]
    logits, _ = score_batch(model, seqs, "hop_classifier_layer")
    k = min(beam_size, n)
    ranked = topk_rank(logits[:, 1], k)
    out["gaps"].append(hop_gaps(logits[:, 1], k))
    out["hop1_logits"] = [[float(a), float(b)] for a, b in logits.tolist()]
    out["hop1_seq_lens"] = [len(s) for s in seqs]
    out["cut_counts"] = [sum(1 for s, c in zip(seqs, ctx) if len(s) < len(q) + len(c))]
    beams = [{"chain": [j], "seq": seqs[j], "score": float(logits[j, 1])} for j in ranked]
    out["hop_beams"] = [[{"chain": b["chain"], "score": b["score"]} for b in beams]]

    for idx in range(1, hops):
        pairs = []  # (beam index, candidate, tokens), in the official batch order
        cut = 0
        last_seen = set()
        for i, b in enumerate(beams):
            last_seen.add(b["chain"][-1])  # updated BEFORE the candidate loop of beam i
            prefix = b["seq"]
            for j in range(n):
                if j in b["chain"] or j in last_seen:
                    continue
                pairs.append((i, j, (prefix + ctx[j])[: budget(idx, len(prefix), len(ctx[j]))]))
                cut += len(pairs[-1][2]) < len(prefix) + len(ctx[j])
        logits, width = score_batch(model, [p[2] for p in pairs], "hop_n_classifier_layer")
        k = min(beam_size, len(pairs))
        ranked = topk_rank(logits[:, 1], k)
        out["gaps"].append(hop_gaps(logits[:, 1], k))
        detail = {
            "hop": idx + 1,
            "padded_len": width,
            "pairs": [[i, j, float(logits[r, 0]), float(logits[r, 1]), len(s)] for r, (i, j, s) in enumerate(pairs)],
        }
        if want_inputs and idx == 1:
            detail["inputs"] = [
                {"beam": i, "j": j, "input_ids": [CLS_ID] + s + [SEP_ID], "mask_len": len(s) + 1,
                 "logits": [float(logits[r, 0]), float(logits[r, 1])]}
                for r, (i, j, s) in enumerate(pairs)
            ]
        out["hops_detail"].append(detail)
        out["cut_counts"].append(cut)
        beams = [
            {"chain": beams[pairs[r][0]]["chain"] + [pairs[r][1]], "seq": pairs[r][2], "score": float(logits[r, 1])}
            for r in ranked
        ]
        out["hop_beams"].append([{"chain": b["chain"], "score": b["score"]} for b in beams])

    out["chain"] = beams[0]["chain"]
    out["chain_score"] = beams[0]["score"]
    out["beams"] = [{"chain": b["chain"], "score": b["score"]} for b in beams]
    out["final_seq_lens"] = [len(b["seq"]) for b in beams]
    out["mean_passage_len"] = mpl
    return out


@torch.no_grad()
def unbatched_check(model, q, ctx, record) -> float:
    """Re-score hop 1 and every recorded pair one at a time, unpadded, without the
    masked [SEP] (mask all ones): must equal the batched logits up to fp noise."""
    worst = 0.0
    if record["hop1_logits"] is None:
        return worst
    hops = record["hops"]
    mpl = record["mean_passage_len"]
    for j, c in enumerate(ctx):
        s = (q + c)[: min(BUDGET - (hops - 1) * mpl, len(q) + len(c))]
        ids = torch.tensor([[CLS_ID] + s], dtype=torch.long)
        lg = model.cls_logits(ids, torch.ones_like(ids), "hop_classifier_layer")[0]
        worst = max(worst, float((lg - torch.tensor(record["hop1_logits"][j])).abs().max()))
    for d in record["hops_detail"]:
        for inp in d.get("inputs", []):
            ids = torch.tensor([inp["input_ids"][: inp["mask_len"]]], dtype=torch.long)
            lg = model.cls_logits(ids, torch.ones_like(ids), "hop_n_classifier_layer")[0]
            worst = max(worst, float((lg - torch.tensor(inp["logits"])).abs().max()))
    return worst


# ----------------------------------------------------------------------------------
# driver


def select_questions(hotpot, musique):
    jobs = []  # (dataset, index, beam_size)
    for i in HOTPOT_B2:
        jobs.append(("hotpotqa", i, 2))
    mus = list(MUSIQUE_B2_FIXED)
    for i, s in enumerate(musique):  # every 4hop3 / 3hop2 question of the sample
        if s["id"].split("__")[0] in ("4hop3", "3hop2") and i not in mus:
            mus.append(i)
    for i in mus:
        jobs.append(("musique", i, 2))
    for i in HOTPOT_B3:
        jobs.append(("hotpotqa", i, 3))
    for i in MUSIQUE_B3:
        jobs.append(("musique", i, 3))
    for i, b in HOTPOT_BIG:
        jobs.append(("hotpotqa", i, b))
    return jobs


def run_all(model, tok, hotpot, musique, log=print):
    records = []
    worst_unbatched = 0.0
    for qn, (ds, i, beam) in enumerate(select_questions(hotpot, musique)):
        if ds == "hotpotqa":
            s = hotpot[i]
            qid, passages, hops = s["_id"], hotpot_passages(s), 2
        else:
            s = musique[i]
            qid, passages, hops = s["id"], musique_passages(s), int(s["id"][0])
        q, ctx = prepare(tok, s["question"], passages)
        res = beam_search(model, q, ctx, hops, beam, want_inputs=qn < N_INPUT_DETAIL)
        rec = {
            "dataset": ds,
            "index": i,
            "id": qid,
            "beam_size": beam,
            "hops": hops,
            "n_passages": len(ctx),
            "question_ids": q,
            "passage_lens": [len(c) for c in ctx],
            "mean_passage_len": res["mean_passage_len"],
            "chain": res["chain"],
            "chain_score": res["chain_score"],
            "beams": res["beams"],
            "hop1_logits": res["hop1_logits"],
        }
        if res["hop1_logits"] is not None:
            rec["hop1_seq_lens"] = res["hop1_seq_lens"]
            rec["hop_beams"] = res["hop_beams"]
            rec["hops_detail"] = res["hops_detail"]
            rec["final_seq_lens"] = res["final_seq_lens"]
            rec["cut_counts"] = res["cut_counts"]
            rec["gaps"] = [{"hop": h + 1, "selection": g[0], "order": g[1]} for h, g in enumerate(res["gaps"])]
        worst_unbatched = max(worst_unbatched, unbatched_check(model, q, ctx, rec))
        records.append(rec)
        log(f"  {ds:8s} #{i:<3d} B={beam} hops={hops} n={len(ctx):2d} |q|={len(q):3d} chain={rec['chain']} "
            f"score={rec['chain_score']}")
    return records, worst_unbatched


def gap_summary(records):
    sel = [(g["selection"], r["dataset"], r["index"], r["beam_size"], g["hop"])
           for r in records for g in r.get("gaps", []) if g["selection"] is not None]
    order = [(g["order"], r["dataset"], r["index"], r["beam_size"], g["hop"])
             for r in records for g in r.get("gaps", []) if g["order"] is not None]
    return min(sel), min(order)


def truncation_summary(records):
    """How many inputs the hop budgets actually cut (so the goldens exercise it)."""
    hop1 = sum(r["cut_counts"][0] for r in records if "cut_counts" in r)
    later = sum(sum(r["cut_counts"][1:]) for r in records if "cut_counts" in r)
    return hop1, later


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--tokenizer", type=Path, default=DEBERTA_TOKENIZER)
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--check", action="store_true", help="compare with the files on disk; write nothing")
    args = ap.parse_args()

    torch.set_num_threads(max(1, min(8, os.cpu_count() or 1)))
    config, model = build_model(args.seed)
    sd = state_dict_bf16(model)
    tok = load_tokenizer(args.tokenizer)
    hotpot, musique = load_data(args.data)

    print(f"seed {args.seed}; running the beam search …")
    records, worst_unbatched = run_all(model, tok, hotpot, musique)
    (sel_gap, *sel_where), (ord_gap, *ord_where) = gap_summary(records)
    hop1_cut, later_cut = truncation_summary(records)
    print(f"min selection gap (B-th minus (B+1)-th, column 1) = {sel_gap:.6f} at {sel_where}")
    print(f"min order gap (adjacent ranks within the top B+1)  = {ord_gap:.6f} at {ord_where}")
    print(f"max |batched - unbatched| logit = {worst_unbatched:.3e}")
    print(f"inputs cut by the hop budget: hop 1: {hop1_cut}; hops >= 2: {later_cut}")

    meta = {
        "generator": "tools/goldens/make_beam_goldens.py",
        "official_code": "canghongjian/beam_retriever retrieval/retriever_model.py Retriever.forward (eval) + "
                         "test_model_tmp.py get_retr_output; SPEC.md section 1 edge-case rules",
        "seed": args.seed,
        "versions": {
            "python": sys.version.split()[0],
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "safetensors": safetensors.__version__,
            "numpy": np.__version__,
        },
        "model": "model/ (config.json + model.safetensors, bf16; reference computed in fp32 with these values)",
        "tokenizer": {"file": "weights/deberta-v3-tokenizer/tokenizer.json", "sha256": file_sha256(args.tokenizer),
                      "settings": "no_truncation, no_padding, add_special_tokens=False"},
        "data": {"hotpotqa": HOTPOT_FILE, "musique": MUSIQUE_FILE},
        "max_len": MAX_LEN,
        "cls_id": CLS_ID,
        "sep_id": SEP_ID,
        "pad_id": PAD_ID,
        "min_selection_gap": sel_gap,
        "min_selection_gap_at": sel_where,
        "min_order_gap": ord_gap,
        "min_order_gap_at": ord_where,
        "max_batched_vs_unbatched": worst_unbatched,
        "inputs_cut": {"hop1": hop1_cut, "later_hops": later_cut},
        "fields": {
            "index": "position of the question in the sample file (0-based)",
            "question_ids": "question token ids after stripping one trailing '?' and cutting to 510",
            "passage_lens": "token count of every passage after the 512-len(q) pre-truncation",
            "chain": "final top-1 chain (passage indices in hop order)",
            "chain_score": "its last-hop logit column 1 (null when n <= hops: nothing scored)",
            "beams": "every final beam in rank order: chain + last-hop logit column 1",
            "hop1_logits": "n x 2 hop-1 logits (hop_classifier_layer), passage order",
            "hop1_seq_lens": "tokens between [CLS] and [SEP] of every hop-1 input",
            "hop_beams": "the beams kept after every hop (rank order)",
            "hops_detail": "per hop >= 2: padded_len (batch width incl. [CLS]/[SEP]) and pairs "
                           "[beam index, candidate j, logit0, logit1, tokens between CLS and SEP] in batch order; "
                           "for the first 3 records the hop-2 entry also has inputs[] with full input_ids "
                           "([CLS] .. [SEP], unpadded) and mask_len (= ones at positions 0..mask_len-1)",
            "final_seq_lens": "token count of the final beams' sequences",
            "cut_counts": "per hop: how many inputs the hop budget cut (len < len(prefix) + len(z))",
            "gaps": "per hop: selection = B-th minus (B+1)-th column-1 score; order = min adjacent gap in the top B+1",
        },
    }
    goldens = {"meta": meta, "questions": records}

    if args.check:
        return check(args.out, sd, config, goldens)

    mdir = args.out / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    config.to_json_file(str(mdir / "config.json"), use_diff=False)
    save_file(sd, str(mdir / "model.safetensors"), metadata={"format": "pt"})
    with open(args.out / "goldens.json", "w", encoding="utf-8") as f:
        json.dump(goldens, f, indent=1)
        f.write("\n")
    # reload check: the stored files give the same logits
    re = reload_model(mdir)
    ids = torch.tensor([[CLS_ID] + records[0]["question_ids"][:20] + [SEP_ID]])
    mask = torch.ones_like(ids)
    mask[0, -1] = 0
    for head in ("hop_classifier_layer", "hop_n_classifier_layer"):
        a = model.cls_logits(ids, mask, head)
        b = re.cls_logits(ids, mask, head)
        if not torch.equal(a, b):
            raise RuntimeError(f"reloaded model differs on {head}")
    print(f"wrote {args.out} (model.safetensors {os.path.getsize(mdir / 'model.safetensors')} bytes, "
          f"goldens.json {os.path.getsize(args.out / 'goldens.json')} bytes)")
    return 0


def check(out: Path, sd, config, goldens) -> int:
    bad = []
    stored = load_file(str(out / "model" / "model.safetensors"))
    if set(stored) != set(sd) or any(not torch.equal(stored[k], sd[k]) for k in sd):
        bad.append("model.safetensors differs")
    with open(out / "goldens.json", encoding="utf-8") as f:
        old = json.load(f)
    if len(old["questions"]) != len(goldens["questions"]):
        bad.append("number of questions differs")

    def cmp(a, b, path):
        if isinstance(a, dict):
            if set(a) != set(b):
                bad.append(f"{path}: keys differ")
                return
            for k in a:
                cmp(a[k], b[k], f"{path}.{k}")
        elif isinstance(a, list):
            if len(a) != len(b):
                bad.append(f"{path}: length differs")
                return
            for i, (x, y) in enumerate(zip(a, b)):
                cmp(x, y, f"{path}[{i}]")
        elif isinstance(a, float) and isinstance(b, float):
            if not math.isclose(a, b, rel_tol=0, abs_tol=1e-5):
                bad.append(f"{path}: {a} vs {b}")
        elif a != b:
            bad.append(f"{path}: {a!r} vs {b!r}")

    for i, (a, b) in enumerate(zip(old["questions"], goldens["questions"])):
        cmp(a, b, f"questions[{i}]")
    if bad:
        print("MISMATCH:\n  " + "\n  ".join(bad[:50]))
        return 1
    print("check OK: model and goldens reproduce")
    return 0


if __name__ == "__main__":
    sys.exit(main())
