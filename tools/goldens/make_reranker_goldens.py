#!/usr/bin/env python3
"""Goldens for the cross-encoder rerankers (src/model/bert.rs, src/model/roberta.rs,
src/model/heads.rs, src/jobs/rerank.rs): random checkpoints of each layout against
HF transformers in float64 and sentence-transformers' ``CrossEncoder.predict``.

Run by hand (never in CI), from the repository root:

    python3 tools/goldens/make_reranker_goldens.py

Writes ``tests/fixtures/rerank/``:

* ``wordpiece/tokenizer.json``: a lower-cased WordPiece tokenizer (2,000 entries,
  BERT's ``[CLS] a [SEP] b [SEP]`` with segment ids) trained on the HotpotQA slice's
  texts; ``unigram/tokenizer.json``: a SentencePiece Unigram model (1,000 pieces)
  trained on them and converted by ``XLMRobertaTokenizerFast`` (XLM-R's
  ``<s> a </s></s> b </s>``, ``<pad>`` = 1, fairseq's id offset; 1,002 ids). Small vocabularies
  keep the checkpoints small.
* one folder per checkpoint, each with config.json, model.safetensors (float32; the
  random weights are normal with std 0.1, LayerNorm weights around 1) and
  ``golden.safetensors`` (the tokenizer is its folder's, given as ``--tokenizer``):

  | folder          | HF class                               | labels | tokenizer |
  |-----------------|----------------------------------------|--------|-----------|
  | bert_seqcls     | BertForSequenceClassification          | 1      | wordpiece |
  | bert_token      | BertForTokenClassification             | 3      | wordpiece |
  | xlmr_seqcls     | XLMRobertaForSequenceClassification    | 1      | unigram   |
  | xlmr_token      | XLMRobertaForTokenClassification       | 3      | unigram   |
  | roberta_seqcls  | RobertaForSequenceClassification       | 2      | unigram   |
  | modernbert_seqcls | ModernBertForSequenceClassification (mean pooling) | 1 | wordpiece |
  | modernbert_cls  | ModernBertForSequenceClassification (cls pooling, tanh GeGLU) | 2 | wordpiece |
  | modernbert_token | ModernBertForTokenClassification      | 3      | wordpiece |

  The ModernBERTs (``python3 tools/goldens/make_reranker_goldens.py modernbert``
  writes them alone): 2 layers, global attention in layer 0
  (``global_attn_every_n_layers=2``), a sliding window of ±8 tokens
  (``local_attention=16``) in layer 1, RoPE θ 160,000 / 10,000, no biases;
  ``norm_bias`` on in modernbert_cls.

  ``golden.safetensors``: ``input_ids``, ``token_type_ids`` int64 (the pairs
  concatenated), ``lengths`` int64, the float64 forward's ``logits`` (float64;
  per token for the ``*_token`` heads) and, for one-label heads, ``st_scores`` float32 (what
  ``CrossEncoder(dir, max_length=128).predict`` returns: the sigmoid of the logit).
  The pairs are (question, title + " " + text) of every passage of the first six
  questions of tests/fixtures/data/hotpot_dev_distractor_slice.json.gz, in passage
  order (60 pairs, as ``hopscore import`` writes them: sentences joined without a
  separator), truncated longest-first to 128 tokens.
* ``minilm_pairs.safetensors``: the ids and segment ids all-MiniLM-L6-v2's real
  tokenizer (weights/all-minilm-l6-v2, tools/fetch_minilm.sh; what the
  ``cross-encoder/ms-marco-MiniLM-*`` models ship) gives the same pairs through
  ``BertTokenizerFast`` with ``truncation=True, max_length=128``.

Requirements: torch, transformers, sentence-transformers, tokenizers, sentencepiece,
protobuf, safetensors (tools/requirements.txt).
"""

from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

from common import FIXTURES, REPO_ROOT, offline

offline()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = FIXTURES / "rerank"
MINILM = REPO_ROOT / "weights" / "all-minilm-l6-v2"
MAX_LENGTH = 128
QUESTIONS = 6


def hotpot_rows() -> list[dict]:
    with gzip.open(FIXTURES / "data" / "hotpot_dev_distractor_slice.json.gz", "rt") as f:
        return json.load(f)


def pairs() -> list[tuple[str, str]]:
    """(question, document) for every passage of the first questions, in order."""
    out = []
    for r in hotpot_rows()[:QUESTIONS]:
        for title, sents in r["context"]:
            out.append((r["question"], f"{title} {''.join(sents)}".strip()))
    return out


def corpus_texts() -> list[str]:
    texts = []
    for r in hotpot_rows():
        texts.append(r["question"])
        texts.extend(f"{t} {''.join(s)}" for t, s in r["context"])
    return texts


TOKENIZER_FILES = ["tokenizer.json", "tokenizer_config.json"]


def wordpiece(folder: Path) -> None:
    from tokenizers import BertWordPieceTokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import BertTokenizer

    tok = BertWordPieceTokenizer(lowercase=True)
    tok.train_from_iterator(corpus_texts(), vocab_size=2000, min_frequency=1)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    # bert-base-uncased's template (the trainer leaves the post-processor empty).
    tok.post_processor = TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    with tempfile.TemporaryDirectory() as tmp:
        tok.save(str(Path(tmp) / "tokenizer.json"))
        # Written back by the class HF loads for model_type bert: its files are what
        # HF (and sentence-transformers) tokenise with.
        BertTokenizer.from_pretrained(tmp).save_pretrained(str(folder))


def unigram(folder: Path) -> None:
    import sentencepiece as spm
    from transformers import XLMRobertaTokenizer

    with tempfile.TemporaryDirectory() as tmp:
        # XLM-R's file name, which XLMRobertaTokenizer converts (needs protobuf).
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(corpus_texts()), model_prefix=str(Path(tmp) / "sentencepiece.bpe"),
            vocab_size=1000, model_type="unigram", num_threads=1, minloglevel=2,
        )
        tok = XLMRobertaTokenizer.from_pretrained(tmp)
        assert len(tok) == 1002, len(tok)
        tok.save_pretrained(str(folder))


def randomize(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * 0.1)
            if "LayerNorm.weight" in name or name.endswith("norm.weight"):
                p.add_(1.0)


def encode(tok, pair_list, with_types: bool):
    enc = tok([q for q, _ in pair_list], [d for _, d in pair_list], truncation=True,
              max_length=MAX_LENGTH, return_token_type_ids=True)
    ids = [torch.tensor(i, dtype=torch.int64) for i in enc["input_ids"]]
    types = [torch.tensor(t, dtype=torch.int64) for t in enc["token_type_ids"]]
    if not with_types:
        types = [torch.zeros_like(t) for t in types]
    return ids, types


def forward64(model, ids, types, token_level: bool):
    """Logits of each pair, one sequence at a time (no padding), in float64."""
    out = []
    with torch.no_grad():
        for i, t in zip(ids, types):
            kwargs = {"input_ids": i[None]}
            if t is not None:
                kwargs["token_type_ids"] = t[None]
            logits = model(**kwargs).logits[0]
            out.append(logits if token_level else logits[None])
    return torch.cat(out, 0)


def build(name: str, cls_name: str, config_cls_name: str, tok_folder: Path, labels: int, seed: int,
          extra: dict) -> None:
    import transformers
    from sentence_transformers import CrossEncoder

    folder = OUT / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    for f in TOKENIZER_FILES:
        shutil.copy(tok_folder / f, folder / f)
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    config = getattr(transformers, config_cls_name)(
        vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, num_labels=labels, **extra,
    )
    model = getattr(transformers, cls_name)(config).eval()
    randomize(model, seed)
    model.save_pretrained(folder)
    bert = config.model_type == "bert"
    ids, types = encode(tok, pairs(), with_types=bert)
    model64 = getattr(transformers, cls_name).from_pretrained(str(folder), dtype=torch.float64).eval()
    token_level = cls_name.endswith("ForTokenClassification")
    logits = forward64(model64, ids, types if bert else [None] * len(ids), token_level)
    golden = {
        "input_ids": torch.cat(ids), "token_type_ids": torch.cat(types),
        "lengths": torch.tensor([len(i) for i in ids], dtype=torch.int64),
        "logits": logits.contiguous(),
    }
    if labels == 1 and not token_level:
        ce = CrossEncoder(str(folder), max_length=MAX_LENGTH, device="cpu")
        scores = ce.predict(pairs(), batch_size=16, convert_to_tensor=True).float()
        golden["st_scores"] = scores.contiguous()
    save_file(golden, str(folder / "golden.safetensors"))
    # The tokenizer is read from its own folder (tests pass it as --tokenizer).
    for f in TOKENIZER_FILES:
        (folder / f).unlink()
    print(f"{name}: {len(ids)} pairs, {sum(len(i) for i in ids)} tokens, logits {tuple(logits.shape)}")


def minilm_pairs() -> None:
    from transformers import BertTokenizerFast

    if not (MINILM / "tokenizer.json").is_file():
        sys.exit("weights/all-minilm-l6-v2 missing: run bash tools/fetch_minilm.sh")
    tok = BertTokenizerFast.from_pretrained(str(MINILM))  # AutoTokenizer's class for it
    ids, types = encode(tok, pairs(), with_types=True)
    save_file(
        {"input_ids": torch.cat(ids), "token_type_ids": torch.cat(types),
         "lengths": torch.tensor([len(i) for i in ids], dtype=torch.int64)},
        str(OUT / "minilm_pairs.safetensors"),
    )
    print(f"minilm_pairs: {len(ids)} pairs")


# XLM-R's conventions: positions from pad_token_id + 1, one token type, fairseq's ids.
XLMR_SHAPE = dict(max_position_embeddings=MAX_LENGTH + 2, type_vocab_size=1, pad_token_id=1,
                  bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5)


def xlmr_token() -> None:
    build("xlmr_token", "XLMRobertaForTokenClassification", "XLMRobertaConfig", OUT / "unigram", 3, 9,
          dict(XLMR_SHAPE))


def modernbert() -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(OUT / "wordpiece"))
    common = dict(max_position_embeddings=MAX_LENGTH, global_attn_every_n_layers=2,
                  local_attention=16, pad_token_id=tok.pad_token_id, cls_token_id=tok.cls_token_id,
                  sep_token_id=tok.sep_token_id, bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
                  attn_implementation="eager")
    build("modernbert_seqcls", "ModernBertForSequenceClassification", "ModernBertConfig", OUT / "wordpiece", 1, 5,
          dict(common, classifier_pooling="mean"))
    build("modernbert_cls", "ModernBertForSequenceClassification", "ModernBertConfig", OUT / "wordpiece", 2, 6,
          dict(common, classifier_pooling="cls", norm_bias=True, hidden_activation="gelu_pytorch_tanh"))
    build("modernbert_token", "ModernBertForTokenClassification", "ModernBertConfig", OUT / "wordpiece", 3, 7,
          dict(common))


def main() -> None:
    if sys.argv[1:] == ["modernbert"]:
        modernbert()
        return
    if sys.argv[1:] == ["xlmr_token"]:
        xlmr_token()
        return
    wordpiece(OUT / "wordpiece")
    unigram(OUT / "unigram")
    build("bert_seqcls", "BertForSequenceClassification", "BertConfig", OUT / "wordpiece", 1, 1,
          dict(max_position_embeddings=MAX_LENGTH))
    build("bert_token", "BertForTokenClassification", "BertConfig", OUT / "wordpiece", 3, 2,
          dict(max_position_embeddings=MAX_LENGTH))
    build("xlmr_seqcls", "XLMRobertaForSequenceClassification", "XLMRobertaConfig", OUT / "unigram", 1, 3,
          dict(XLMR_SHAPE))
    build("roberta_seqcls", "RobertaForSequenceClassification", "RobertaConfig", OUT / "unigram", 2, 4,
          dict(XLMR_SHAPE))
    xlmr_token()
    minilm_pairs()
    modernbert()


if __name__ == "__main__":
    main()
