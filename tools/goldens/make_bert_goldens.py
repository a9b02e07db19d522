#!/usr/bin/env python3
"""Golden outputs for the BERT embedder (src/model/bert.rs).

Run by hand (never in CI), from the repository root:

    python3 tools/goldens/make_bert_goldens.py [minilm] [random] [modernbert]

* ``minilm``: all-MiniLM-L6-v2 (fetched by tools/fetch_minilm.sh) through
  sentence-transformers, fp32 on CPU, over 60 real HotpotQA texts: the question and
  the two gold passages (``title + " " + sentences joined``) of the first 20 questions
  of the slice tests/fixtures/data/hotpot_dev_distractor_slice.json.gz. Writes
  ``tests/fixtures/bert/minilm/golden.safetensors``: ``embeddings`` float32 [60, 384]
  (normalised, as `encode` returns them), ``lengths`` int64 [60] and ``input_ids``
  int64 (concatenated) of the tokenizer, and ``refs.json`` naming each text.
* ``random``: a random BertModel in the Contriever layout (bare ``embeddings.`` /
  ``encoder.`` / ``pooler.`` keys, no sentence-transformers files): vocab 1000, 64 wide,
  4 heads, 2 layers. ``tests/fixtures/bert/random_plain/`` holds config.json,
  model.safetensors and golden.safetensors: ``input_ids``, ``token_type_ids``,
  ``attention_mask`` int64 [3, 300] (right padding), ``last_hidden_state`` float32
  [3, 300, 64], ``mean`` and ``cls`` float32 [3, 64].
* ``modernbert``: a random ModernBertModel bi-encoder in the sentence-transformers
  layout (Transformer with ``max_seq_length`` 128, mean Pooling, Normalize), 32 wide,
  4 heads, 2 layers (layer 0 global, layer 1 a sliding window of ±8 tokens), the
  WordPiece tokenizer of tests/fixtures/rerank/wordpiece. ``tests/fixtures/bert/
  modernbert_st/`` holds what ``SentenceTransformer.save`` writes and golden.safetensors:
  ``embeddings`` float32 [60, 32] (``encode`` of the 60 texts of ``minilm``, truncated
  at 128 tokens), ``lengths`` and ``input_ids`` int64 of the tokenizer.

Requirements: torch, transformers, sentence-transformers, safetensors.
"""

from __future__ import annotations

import gzip
import json
import sys

from common import FIXTURES, REPO_ROOT, offline

offline()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = FIXTURES / "bert"
MINILM = REPO_ROOT / "weights" / "all-minilm-l6-v2"


def minilm_texts() -> tuple[list[str], list[dict]]:
    """(texts, refs): per question, the question then its gold passages in context order."""
    with gzip.open(FIXTURES / "data" / "hotpot_dev_distractor_slice.json.gz", "rt") as f:
        rows = json.load(f)[:20]
    texts, refs = [], []
    for r in rows:
        texts.append(r["question"])
        refs.append({"id": r["_id"], "kind": "question"})
        gold = {t for t, _ in r["supporting_facts"]}
        for title, sents in r["context"]:
            if title in gold:
                texts.append(f"{title} {''.join(sents)}")
                refs.append({"id": r["_id"], "kind": "passage", "title": title})
    return texts, refs


def minilm() -> None:
    from sentence_transformers import SentenceTransformer

    if not (MINILM / "model.safetensors").is_file():
        sys.exit("weights/all-minilm-l6-v2 missing: run bash tools/fetch_minilm.sh")
    texts, refs = minilm_texts()
    assert len(texts) == 60, len(texts)
    model = SentenceTransformer(str(MINILM), device="cpu")
    emb = model.encode(texts, batch_size=16, convert_to_tensor=True).float()
    enc = [model.tokenizer(t, truncation=True, max_length=model.max_seq_length)["input_ids"] for t in texts]
    out = OUT / "minilm"
    out.mkdir(parents=True, exist_ok=True)
    save_file(
        {
            "embeddings": emb.contiguous(),
            "lengths": torch.tensor([len(e) for e in enc], dtype=torch.int64),
            "input_ids": torch.tensor([i for e in enc for i in e], dtype=torch.int64),
        },
        str(out / "golden.safetensors"),
    )
    (out / "refs.json").write_text(json.dumps(refs, indent=1) + "\n")
    print(f"minilm: {len(texts)} texts, max length {max(len(e) for e in enc)}")


def random_plain() -> None:
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=1000, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=256, max_position_embeddings=512, type_vocab_size=2,
    )
    model = BertModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.1)
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.add_(1.0)
    out = OUT / "random_plain"
    model.save_pretrained(out)
    lengths = [300, 137, 9]
    ids = torch.zeros(3, 300, dtype=torch.int64)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    g = torch.Generator().manual_seed(1)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(3, 1000, (n,), generator=g)
        ids[b, 0], ids[b, n - 1] = 1, 2
        types[b, n // 2 : n] = 1
        mask[b, :n] = 1
    with torch.no_grad():
        h = model(input_ids=ids, token_type_ids=types, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).float()
    mean = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
    save_file(
        {
            "input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "last_hidden_state": h.contiguous(), "mean": mean.contiguous(), "cls": h[:, 0].contiguous(),
        },
        str(out / "golden.safetensors"),
    )
    print("random_plain: written")


def modernbert_st() -> None:
    import shutil
    import tempfile

    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertModel

    tok_dir = FIXTURES / "rerank" / "wordpiece"
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    config = ModernBertConfig(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=128, global_attn_every_n_layers=2,
        local_attention=16, pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id,
        sep_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        attn_implementation="eager",
    )
    model = ModernBertModel(config).eval()
    g = torch.Generator().manual_seed(8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            if name.endswith("norm.weight"):
                p.add_(1.0)
    out = OUT / "modernbert_st"
    if out.exists():
        shutil.rmtree(out)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        body = models.Transformer(tmp, max_seq_length=128)
        pool = models.Pooling(body.get_embedding_dimension(), pooling_mode="mean")
        SentenceTransformer(modules=[body, pool, models.Normalize()], device="cpu").save(str(out))
    st = SentenceTransformer(str(out), device="cpu")
    texts, _ = minilm_texts()
    emb = st.encode(texts, batch_size=16, convert_to_tensor=True).float()
    enc = [st.tokenizer(t, truncation=True, max_length=st.max_seq_length)["input_ids"] for t in texts]
    save_file(
        {
            "embeddings": emb.contiguous(),
            "lengths": torch.tensor([len(e) for e in enc], dtype=torch.int64),
            "input_ids": torch.tensor([i for e in enc for i in e], dtype=torch.int64),
        },
        str(out / "golden.safetensors"),
    )
    print(f"modernbert_st: {len(texts)} texts, {sum(len(e) for e in enc)} tokens, "
          f"{sum(len(e) == 128 for e in enc)} truncated at 128")


if __name__ == "__main__":
    which = sys.argv[1:] or ["minilm", "random", "modernbert"]
    if "minilm" in which:
        minilm()
    if "random" in which:
        random_plain()
    if "modernbert" in which:
        modernbert_st()
