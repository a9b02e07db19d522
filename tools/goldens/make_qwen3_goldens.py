#!/usr/bin/env python3
"""Goldens for the Qwen3 LLM rerankers (src/model/decoder.rs, src/text/rerank_prompt.rs,
src/jobs/rerank.rs): random Qwen3 checkpoints against HF transformers in float64,
scored as the Qwen3-Reranker model card scores them.

Run by hand (never in CI), from the repository root:

    python3 tools/goldens/make_qwen3_goldens.py

Writes ``tests/fixtures/rerank/``:

* ``bpe/tokenizer.json`` (+ tokenizer_config.json): a byte-level BPE (Qwen2's
  pre-tokenizer regex, 700 entries) trained on the HotpotQA slice's texts, with
  Qwen's ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` as special tokens and
  ``<think>``, ``</think>`` as added tokens, and the tokens ``yes`` and ``no``.
* ``qwen3_reranker/``: a random ``Qwen3ForCausalLM`` (2 layers, 4 heads of 16 over
  2 KV heads on a hidden size of 32, tied embeddings, ``q_norm``/``k_norm`` weights
  around 1) with ``golden.safetensors``: ``input_ids`` (the pairs concatenated, each
  ``prefix + tokenizer(format_instruction(...)) + suffix`` as the model card builds
  it), ``lengths``, ``p_yes`` (float64: the softmax over the logits of ``no`` and
  ``yes`` at the last token, the card's ``compute_logits``), and the same for the
  first 10 pairs under ``INSTRUCTION`` (``input_ids_instruction``,
  ``lengths_instruction``, ``p_yes_instruction``).
* ``qwen3_seqcls/``: that model converted to ``Qwen3ForSequenceClassification`` with
  one label, ``score.weight = lm_head[yes] − lm_head[no]`` (the conversion the
  ``*-seq-cls`` checkpoints use), with ``logits`` (float64) of the same sequences:
  their sigmoid is ``p_yes``.

The pairs are (question, title + " " + text) of every passage of the first six
questions of tests/fixtures/data/hotpot_dev_distractor_slice.json.gz (60 pairs).
Requirements: torch, transformers, tokenizers, safetensors (tools/requirements.txt).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from common import FIXTURES, offline
from make_reranker_goldens import corpus_texts, pairs

offline()

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

OUT = FIXTURES / "rerank"

# The Qwen3-Reranker model card (huggingface.co/Qwen/Qwen3-Reranker-0.6B, "Transformers
# Usage"), verbatim.
PREFIX = (
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query "
    'and the Instruct provided. Note that the answer can only be "yes" or "no".<|im_end|>\n'
    "<|im_start|>user\n"
)
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
DEFAULT_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
INSTRUCTION = "Given a multi-hop question, find a passage that holds one of its facts"
MAX_LENGTH = 8192


def format_instruction(instruction: str, query: str, doc: str) -> str:
    return f"<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}"


def bpe(folder: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    # Qwen2's tokenizer.json: the split regex, then byte-level without its own split.
    split = Regex(
        r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
        r"|\s*[\r\n]+|\s+(?!\S)|\s+"
    )
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(split, behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    special = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = corpus_texts() + [PREFIX, SUFFIX, DEFAULT_INSTRUCTION, INSTRUCTION] + ["yes\nno"] * 200
    tok.train_from_iterator(texts, trainer)
    tok.add_tokens(["<think>", "</think>"])
    for word in ("yes", "no"):
        assert tok.token_to_id(word) is not None, word
    with tempfile.TemporaryDirectory() as tmp:
        tok.save(str(Path(tmp) / "tokenizer.json"))
        fast = PreTrainedTokenizerFast(
            tokenizer_file=str(Path(tmp) / "tokenizer.json"), eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
        )
        fast.save_pretrained(str(folder))


def encode(tok, instruction: str, pair_list) -> list[list[int]]:
    """The model card's ``process_inputs`` without the padding."""
    prefix = tok.encode(PREFIX, add_special_tokens=False)
    suffix = tok.encode(SUFFIX, add_special_tokens=False)
    texts = [format_instruction(instruction, q, d) for q, d in pair_list]
    body = tok(texts, padding=False, truncation="longest_first", return_attention_mask=False,
               max_length=MAX_LENGTH - len(prefix) - len(suffix))["input_ids"]
    return [prefix + b + suffix for b in body]


def last_logits(model, seqs) -> torch.Tensor:
    with torch.no_grad():
        return torch.stack([model(input_ids=torch.tensor([s])).logits[0, -1] for s in seqs])


def p_yes(model, seqs, yes: int, no: int) -> torch.Tensor:
    """The card's ``compute_logits``: log_softmax over [no, yes], exp of yes."""
    logits = last_logits(model, seqs)
    two = torch.stack([logits[:, no], logits[:, yes]], dim=1)
    return torch.log_softmax(two, dim=1)[:, 1].exp()


def flat(seqs):
    return {
        "ids": torch.tensor([t for s in seqs for t in s], dtype=torch.int64),
        "lengths": torch.tensor([len(s) for s in seqs], dtype=torch.int64),
    }


def main() -> None:
    from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

    tok_dir = OUT / "bpe"
    bpe(tok_dir)
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    yes, no = tok.convert_tokens_to_ids("yes"), tok.convert_tokens_to_ids("no")
    config = Qwen3Config(
        vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=1024,
        tie_word_embeddings=True, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype)
            p.copy_(1.0 + 0.2 * noise if "norm" in name else 0.15 * noise)
    rr = OUT / "qwen3_reranker"
    shutil.rmtree(rr, ignore_errors=True)
    model.save_pretrained(rr)
    (rr / "generation_config.json").unlink(missing_ok=True)
    model64 = Qwen3ForCausalLM.from_pretrained(str(rr), dtype=torch.float64).eval()
    seqs = encode(tok, DEFAULT_INSTRUCTION, pairs())
    custom = encode(tok, INSTRUCTION, pairs()[:10])
    a, b = flat(seqs), flat(custom)
    golden = {
        "input_ids": a["ids"], "lengths": a["lengths"], "p_yes": p_yes(model64, seqs, yes, no),
        "input_ids_instruction": b["ids"], "lengths_instruction": b["lengths"],
        "p_yes_instruction": p_yes(model64, custom, yes, no),
    }
    save_file({k: v.contiguous() for k, v in golden.items()}, str(rr / "golden.safetensors"))
    print(f"qwen3_reranker: {len(seqs)} pairs, {int(a['lengths'].sum())} tokens, "
          f"p_yes {golden['p_yes'].min():.3f}..{golden['p_yes'].max():.3f}")

    sc = OUT / "qwen3_seqcls"
    shutil.rmtree(sc, ignore_errors=True)
    cls_config = Qwen3Config(**{**config.to_dict(), "num_labels": 1,
                                "architectures": ["Qwen3ForSequenceClassification"]})
    cls = Qwen3ForSequenceClassification(cls_config).eval()
    with torch.no_grad():
        cls.model.load_state_dict(model.model.state_dict())
        head = model.lm_head.weight
        cls.score.weight.copy_((head[yes] - head[no])[None])
    cls.save_pretrained(sc)
    cls64 = Qwen3ForSequenceClassification.from_pretrained(str(sc), dtype=torch.float64).eval()
    with torch.no_grad():
        logits = torch.stack([cls64(input_ids=torch.tensor([s])).logits[0] for s in seqs])
    assert torch.allclose(torch.sigmoid(logits[:, 0]), golden["p_yes"], atol=1e-12)
    save_file({"logits": logits.contiguous()}, str(sc / "golden.safetensors"))
    print(f"qwen3_seqcls: logits {tuple(logits.shape)}")
    print(json.dumps({"yes": yes, "no": no, "vocab": len(tok)}))


if __name__ == "__main__":
    main()
