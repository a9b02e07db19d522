#!/usr/bin/env python3
"""Generate goldens for the EfficientRAG retrieval loop on real questions.

Run by hand (never in CI), from the repository root:

    python3 tools/goldens/make_efficientrag_goldens.py
    python3 tools/goldens/make_efficientrag_goldens.py --check

Options: ``--out DIR`` (default ``tests/fixtures/efficientrag``), ``--data DIR``
(default ``data/`` in the checkout, or ``$HOPSCORE_DATA``), ``--tokenizer FILE`` (default
``weights/deberta-v3-tokenizer/tokenizer.json``), ``--check`` (recompute and compare
with the files on disk, writing nothing).

What it does:

1. Builds two small random DeBERTa-v3 checkpoints with the real vocabulary (128100):
   the Labeler (``DebertaForSequenceTokenClassification`` of the official
   ``efficient_rag/model/model.py``: ``deberta.*``, ``pooler.dense.*``,
   ``sequence_classifier.*`` (2 tags), ``token_classifier.*``) and the Filter
   (``DebertaV2ForTokenClassification``, 2 labels). Both share one word-embedding
   matrix, stored once in ``word_embeddings.safetensors`` and referenced from each
   checkpoint's ``model.safetensors.index.json`` (keeps the fixture at ~1 MB).
   Weights are rounded to bfloat16; the reference runs in fp32 on the rounded values.
2. Re-implements the official loop (``src/efficientrag_retrieve.py`` of
   microsoft/EfficientRAG @6b2489f): ``MAX_ITER`` 4, top-k 10, labeler inputs
   ``[CLS] q_words [SEP] chunk_words [SEP]`` cut and padded to 384, filter input
   ``[CLS] words("Query: {q} " + "; ".join("Info: {info}")) [SEP]`` cut and padded to
   128, argmax per subword, kept text = ``decode(ids labelled 1,
   skip_special_tokens=True)`` with transformers 4.x's default
   ``clean_up_tokenization_spaces=True``, chunk tag = argmax of the tag logits, stop
   when no chunk is ``<CONTINUE>``.
   Two documented substitutions (README "Deviations"): spaCy's ``en_core_web_sm``
   word split is replaced by the rule in ``word_split`` (the same rule as
   ``src/text/words.rs``), and the dense Contriever index by BM25 (Lucene scoring,
   k1 0.9, b 0.4, the analyzer of ``src/retrieve/mod.rs``) over the question's own
   passages, each rendered as the official corpus chunk ``"{title}: {text}"``.
3. Writes ``<out>/goldens.json``: question ids and model outputs only. Texts the
   models produce (kept text, queries) are stored as sha256 prefixes, so no dataset
   text is committed; the Rust test reads the questions from the slices in
   tests/fixtures/data (make_data_slices.py keeps every question named here).

Questions are kept only when every decision that matters is clear: each argmax over
real (non-special) subwords and each tag argmax has a logit gap >= GAP_MIN, so the
fp32 differences between implementations (~1e-6) cannot flip a label.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from pathlib import Path

from common import DATA_DIR, DEBERTA_TOKENIZER, FIXTURES, HOTPOT_FILE, MUSIQUE_FILE, offline, read_records

offline()

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch import nn  # noqa: E402

import transformers  # noqa: E402
from transformers import DebertaV2Config, PreTrainedTokenizerFast  # noqa: E402
from transformers.models.deberta_v2 import modeling_deberta_v2 as hf  # noqa: E402

# Weights N(0, 0.5), LayerNorms 1 + N(0, 0.1) / N(0, 0.1), in named_modules() order.
from make_beam_goldens import MODEL_CONFIG as BEAM_MODEL_CONFIG, randomize  # noqa: E402

DEFAULT_OUT = FIXTURES / "efficientrag"

PAD_ID, CLS_ID, SEP_ID = 0, 1, 2
MAX_ITER = 4
TOP_K = 10
LABELER_MAX_LENGTH = 384
FILTER_MAX_LENGTH = 128
TAGS = ["<CONTINUE>", "<TERMINATE>"]
GAP_MIN = 5e-5

LABELER_SEED, FILTER_SEED = 9101, 9102
# Added to the tag head's bias so that both tags occur and loops of every length
# (1-4 iterations) appear among the questions (chosen by looking at the histogram).
TERMINATE_BIAS = -0.35
N_HOTPOT, N_MUSIQUE, N_MEAN = 16, 8, 4

# The Beam Retrieval fixture's DeBERTa-v3 shape, narrowed to hidden 4.
MODEL_CONFIG = dict(BEAM_MODEL_CONFIG, hidden_size=4, intermediate_size=8, pooler_hidden_size=4)
EMBEDDING_KEY = "deberta.embeddings.word_embeddings.weight"
OWN_FILE = "weights.safetensors"  # each checkpoint's tensors other than the shared embedding

# ----------------------------------------------------------------------------------
# words (the rule of src/text/words.rs)

PUNCT = set("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") | set("\u201c\u201d\u2018\u2019\u2013\u2014\u2026\u00ab\u00bb")
SUFFIXES = ["'s", "\u2019s", "n't", "n\u2019t"]


def is_space(c: str) -> bool:
    """Unicode White_Space (Rust's char::is_whitespace): Python's isspace minus \\x1c-\\x1f."""
    return c.isspace() and c not in "\x1c\x1d\x1e\x1f"


def word_split(text: str) -> list[str]:
    words = []
    piece = []
    for c in text + " ":
        if is_space(c):
            if piece:
                words.extend(split_piece("".join(piece)))
                piece = []
        else:
            piece.append(c)
    return [w for w in words if w != ","]


def split_piece(p: str) -> list[str]:
    chars = list(p)
    lead = 0
    while lead < len(chars) and chars[lead] in PUNCT:
        lead += 1
    trail = len(chars)
    while trail > lead and chars[trail - 1] in PUNCT:
        trail -= 1
    out = chars[:lead]
    core = "".join(chars[lead:trail])
    if core:
        low = core.lower()
        suffix = next((s for s in SUFFIXES if low.endswith(s) and len(core) > len(s)), None)
        if suffix:
            out += [core[: -len(suffix)], core[-len(suffix):]]
        else:
            out.append(core)
    out += chars[trail:]
    return out


# ----------------------------------------------------------------------------------
# BM25 (the rule of src/retrieve/bm25.rs)

STOP_WORDS = set(
    "a an and are as at be but by for if in into is it no not of on or such that the their "
    "then there these they this to was will with".split()
)


def terms(text: str) -> list[str]:
    out, cur = [], []
    for c in text + " ":
        if c.isalnum() or c == "_":
            cur.append(c.lower())
        else:
            if len(cur) >= 2:
                out.append("".join(cur))
            cur = []
    return [t for t in out if t not in STOP_WORDS]


class Bm25:
    def __init__(self, docs: list[str], k1=0.9, b=0.4):
        self.k1, self.b = k1, b
        self.postings: dict[str, list[tuple[int, int]]] = {}
        self.doc_len = []
        for d, doc in enumerate(docs):
            words = terms(doc)
            self.doc_len.append(len(words))
            counts: dict[str, int] = {}
            for w in words:
                counts[w] = counts.get(w, 0) + 1
            for w, tf in counts.items():
                self.postings.setdefault(w, []).append((d, tf))
        self.avg = sum(self.doc_len) / len(docs) if docs else 0.0

    def search(self, query: str, k: int) -> list[int]:
        n = float(len(self.doc_len))
        acc: dict[int, float] = {}
        for w in terms(query):
            plist = self.postings.get(w)
            if plist is None:
                continue
            df = float(len(plist))
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            for d, tf in plist:
                tf = float(tf)
                norm = self.k1 * (1.0 - self.b + self.b * float(self.doc_len[d]) / self.avg)
                acc[d] = acc.get(d, 0.0) + idf * tf * (self.k1 + 1.0) / (tf + norm)
        return [d for d, _ in sorted(acc.items(), key=lambda x: (-x[1], x[0]))[:k]]


# ----------------------------------------------------------------------------------
# models


class Labeler(nn.Module):
    """The official DebertaForSequenceTokenClassification (inference path)."""

    def __init__(self, config, tags: int):
        super().__init__()
        self.deberta = hf.DebertaV2Model(config)
        self.pooler = hf.ContextPooler(config)
        self.sequence_classifier = nn.Linear(config.pooler_hidden_size, tags)
        self.token_classifier = nn.Linear(config.hidden_size, 2)

    @torch.no_grad()
    def forward(self, ids, mask, pooling="cls"):
        h = self.deberta(input_ids=ids, attention_mask=mask).last_hidden_state
        if pooling == "cls":
            pooled = self.pooler(h)
        else:  # the paper's mean pooling, through the same pooler dense + activation
            m = mask.unsqueeze(-1).to(h.dtype)
            mean = (h * m).sum(1) / m.sum(1)
            pooled = transformers.activations.ACT2FN["gelu"](self.pooler.dense(mean))
        return self.sequence_classifier(pooled), self.token_classifier(h)


def round_bf16(model: nn.Module) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def make_config(**extra) -> DebertaV2Config:
    c = DebertaV2Config(**MODEL_CONFIG, **extra)
    c.dtype = torch.bfloat16
    return c


def build_models():
    torch.manual_seed(0)
    labeler = Labeler(make_config(), len(TAGS))
    randomize(labeler, torch.Generator().manual_seed(LABELER_SEED))
    with torch.no_grad():
        labeler.sequence_classifier.bias[1] += TERMINATE_BIAS
    filt = hf.DebertaV2ForTokenClassification(make_config(num_labels=2, architectures=["DebertaV2ForTokenClassification"]))
    randomize(filt, torch.Generator().manual_seed(FILTER_SEED))
    with torch.no_grad():
        filt.deberta.embeddings.word_embeddings.weight.copy_(labeler.deberta.embeddings.word_embeddings.weight)
    for m in (labeler, filt):
        round_bf16(m)
        m.eval()
    return labeler, filt


def save_checkpoint(model: nn.Module, config: DebertaV2Config, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    config.to_json_file(str(folder / "config.json"), use_diff=False)
    sd = {k: v.detach().to(torch.bfloat16).contiguous().clone() for k, v in model.state_dict().items()}
    sd.pop(EMBEDDING_KEY)
    # Not `model.safetensors`: loaders read that file alone when it exists.
    save_file(sd, str(folder / OWN_FILE), metadata={"format": "pt"})
    weight_map = {k: OWN_FILE for k in sorted(sd)}
    weight_map[EMBEDDING_KEY] = "../word_embeddings.safetensors"
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": dict(sorted(weight_map.items()))}, indent=1) + "\n"
    )


def reload_state(folder: Path) -> dict:
    sd = {k: v.float() for k, v in load_file(str(folder / OWN_FILE)).items()}
    sd[EMBEDDING_KEY] = load_file(str(folder.parent / "word_embeddings.safetensors"))[EMBEDDING_KEY].float()
    return sd


# ----------------------------------------------------------------------------------
# the loop


def sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


class Reference:
    def __init__(self, tok_path: Path, labeler, filt):
        self.tok = PreTrainedTokenizerFast(tokenizer_file=str(tok_path))
        self.labeler, self.filt = labeler, filt
        self.special = set(self.tok.all_special_ids)

    def word_ids(self, text: str) -> list[int]:
        return sum((self.tok(w, add_special_tokens=False)["input_ids"] for w in word_split(text)), [])

    def decode(self, ids) -> str:
        return self.tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=True)

    def pad(self, seqs: list[list[int]], width: int):
        ids = torch.zeros((len(seqs), width), dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for r, s in enumerate(seqs):
            ids[r, : len(s)] = torch.tensor(s)
            mask[r, : len(s)] = 1
        return ids, mask

    def token_gap(self, seqs, logits) -> float:
        gap = math.inf
        for r, s in enumerate(seqs):
            for t, i in enumerate(s):
                if i not in self.special:
                    gap = min(gap, abs(float(logits[r, t, 1] - logits[r, t, 0])))
        return gap

    def run(self, question: str, chunks: list[str], pooling="cls") -> dict:
        index = Bm25(chunks)
        chunk_ids = {}
        query, iterations, gap = question, [], math.inf
        for _ in range(MAX_ITER):
            retrieved = index.search(query, TOP_K)
            it = {"query_sha": sha(query), "retrieved": retrieved}
            iterations.append(it)
            if not retrieved:
                it.update(tags=[], tag_logits=[], kept_sha=[], kept_chars=[], input_lens=[], next_query_sha=None)
                break
            q_ids = self.word_ids(query)
            seqs = []
            for d in retrieved:
                if d not in chunk_ids:
                    chunk_ids[d] = self.word_ids(chunks[d])
                seqs.append(([CLS_ID] + q_ids + [SEP_ID] + chunk_ids[d] + [SEP_ID])[:LABELER_MAX_LENGTH])
            ids, mask = self.pad(seqs, LABELER_MAX_LENGTH)
            tag_logits, tok_logits = self.labeler(ids, mask, pooling)
            gap = min(gap, self.token_gap(seqs, tok_logits))
            for row in tag_logits:
                top = sorted((float(x) for x in row), reverse=True)
                gap = min(gap, top[0] - top[1])
            labels = tok_logits.argmax(-1)
            infos = [self.decode(ids[r][labels[r] == 1].tolist()) for r in range(len(seqs))]
            tags = [TAGS[int(t)] for t in tag_logits.argmax(-1)]
            it.update(
                tags=tags,
                tag_logits=[[float(x) for x in row] for row in tag_logits],
                kept_sha=[sha(i) for i in infos],
                kept_chars=[len(i) for i in infos],
                input_lens=[len(s) for s in seqs],
                next_query_sha=None,
            )
            next_info = [i for i, t in zip(infos, tags) if t == "<CONTINUE>"]
            if not next_info:
                break
            info_list = [i for i in next_info if len(i.strip()) > 0]
            sentence = "Query: {} {}".format(query, "; ".join(f"Info: {i}" for i in info_list))
            f_ids = ([CLS_ID] + self.word_ids(sentence) + [SEP_ID])[:FILTER_MAX_LENGTH]
            ids, mask = self.pad([f_ids], FILTER_MAX_LENGTH)
            with torch.no_grad():
                logits = self.filt(input_ids=ids, attention_mask=mask).logits
            gap = min(gap, self.token_gap([f_ids], logits))
            query = self.decode(ids[0][logits[0].argmax(-1) == 1].tolist())
            it.update(next_query_sha=sha(query), filter_input_len=len(f_ids))
        kept = []
        for it in iterations:
            for d, t in zip(it["retrieved"], it["tags"]):
                if t != "<TERMINATE>" and d not in kept:
                    kept.append(d)
        return {"iterations": iterations, "kept": kept, "min_gap": gap}


def hotpot_chunks(rec) -> list[str]:
    return [f"{title}: {' '.join(sents)}" for title, sents in rec["context"]]


def musique_chunks(rec) -> list[str]:
    return [f"{p['title']}: {p['paragraph_text']}" for p in rec["paragraphs"]]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--tokenizer", type=Path, default=DEBERTA_TOKENIZER)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)

    labeler, filt = build_models()
    if not args.check:
        args.out.mkdir(parents=True, exist_ok=True)
        emb = labeler.deberta.embeddings.word_embeddings.weight.detach().to(torch.bfloat16).contiguous().clone()
        save_file({EMBEDDING_KEY: emb}, str(args.out / "word_embeddings.safetensors"), metadata={"format": "pt"})
        save_checkpoint(labeler, labeler.deberta.config, args.out / "labeler")
        save_checkpoint(filt, filt.config, args.out / "filter")
    # The reference runs on the weights as stored (strict reload).
    labeler.load_state_dict(reload_state(args.out / "labeler"), strict=True)
    filt.load_state_dict(reload_state(args.out / "filter"), strict=True)

    ref = Reference(args.tokenizer, labeler, filt)
    hotpot = read_records(args.data / HOTPOT_FILE)
    musique = read_records(args.data / MUSIQUE_FILE)

    questions, skipped = [], []
    for name, data, render, want in (
        ("hotpotqa", hotpot, hotpot_chunks, N_HOTPOT),
        ("musique", musique, musique_chunks, N_MUSIQUE),
    ):
        taken = 0
        for index, rec in enumerate(data):
            if taken == want:
                break
            rid = rec.get("_id", rec.get("id"))
            out = ref.run(rec["question"], render(rec))
            if out["min_gap"] < GAP_MIN:
                skipped.append([name, index, out["min_gap"]])
                continue
            taken += 1
            questions.append({"dataset": name, "index": index, "id": rid, "pooling": "cls", **out})
            print(name, index, len(out["iterations"]), f"gap {out['min_gap']:.2e}", file=sys.stderr)
    mean_taken = 0
    for index, rec in enumerate(hotpot):
        if mean_taken == N_MEAN:
            break
        out = ref.run(rec["question"], hotpot_chunks(rec), pooling="mean")
        if out["min_gap"] < GAP_MIN:
            continue
        mean_taken += 1
        questions.append({"dataset": "hotpotqa", "index": index, "id": rec["_id"], "pooling": "mean", **out})

    hist = {}
    tags = {}
    for q in questions:
        n = len(q["iterations"])
        hist[n] = hist.get(n, 0) + 1
        for it in q["iterations"]:
            for t in it["tags"]:
                tags[t] = tags.get(t, 0) + 1
    golden = {
        "meta": {
            "generator": "tools/goldens/make_efficientrag_goldens.py",
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "seeds": [LABELER_SEED, FILTER_SEED],
            "terminate_bias": TERMINATE_BIAS,
            "gap_min": GAP_MIN,
            "iterations_histogram": {str(k): v for k, v in sorted(hist.items())},
            "tag_counts": tags,
            "skipped_for_small_gaps": skipped,
            "max_iter": MAX_ITER,
            "top_k": TOP_K,
        },
        "questions": questions,
    }
    print("iterations", hist, "tags", tags, "skipped", len(skipped), file=sys.stderr)
    path = args.out / "goldens.json"
    text = json.dumps(golden, indent=None, separators=(",", ":")) + "\n"
    if args.check:
        old = json.loads(path.read_text())
        same = old["questions"] == golden["questions"]
        print("goldens identical" if same else "goldens DIFFER", file=sys.stderr)
        return 0 if same else 1
    path.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
