#!/usr/bin/env python3
"""Goldens for hopscore's T5 encoder-decoder (tests/t5_parity.rs, tests/lepus_parity.rs):
random T5 checkpoints of both layouts scored by HF transformers'
`T5ForConditionalGeneration` on real HotpotQA prompts.

Run by hand, never in CI (needs torch, transformers, tokenizers, safetensors):

    python3 tools/goldens/make_t5_goldens.py

No T5 weights or T5 tokenizer can be fetched here, so the script makes its own:

- tests/fixtures/t5/v1_0/tokenizer.json (and the same in v1_1/): a Unigram tokenizer
  (800 pieces) trained on the ASCII characters of the HotpotQA passages of the dev
  sample's questions 100-299 (others are `<unk>`), in the T5 layout: `<pad>`
  0, `</s>` 1, `<unk>` 2, Metaspace pre-tokenizer and decoder, runs of spaces folded,
  and a post-processor that appends `</s>` (as T5's tokenizer.json does); piece scores
  rounded to 6 decimals and pieces ordered by score (the trainer's last digits vary
  between runs).
- tests/fixtures/t5/v1_0/: T5 v1.0 layout: `feed_forward_proj: relu`, tied LM head
  (the decoder output scaled by d_model^-0.5), 32 buckets up to distance 128, one
  `model.safetensors`.
- tests/fixtures/t5/v1_1/: T5 v1.1 / LM-adapt / Flan layout: `gated-gelu`,
  `tie_word_embeddings: false` with its own `lm_head.weight`, d_kv · heads ≠ d_model,
  more decoder than encoder blocks, 16 buckets up to distance 40, two safetensors
  shards with `model.safetensors.index.json`.

A model that transformers 5.x builds from a config has `lm_head` tied to `shared`
whatever the config says (`T5Config.__post_init__` forces `tie_word_embeddings =
True` and keeps only the output scaling); it unties them when it loads a checkpoint
that holds a different `lm_head.weight`, as the v1.1 family's do. The reference model
is untied by hand before its weights are drawn, so that it is such a checkpoint.

The log-probabilities are computed with the model in float64 (the float32 model is
within 6.5e-6 of them on v1_1 and 3.1e-7 on v1_0): hopscore's f32 scores are held to
the exact values, not to another f32 rounding of them.

Writes tests/fixtures/t5/logprobs.json: per model, per prompt (the first question's
passages, single and pairs, for 10 questions, under hopscore's first template) the
encoder ids, the label ids (the question with `</s>`) and the per-token
log-probabilities (float64) at T = 1 and T = 1.7; and the relative-position buckets of both
configurations for positions -700..700 in both directions.
"""

import json

from common import FIXTURES, hotpot_rows, offline

offline()

import torch  # noqa: E402

OUT = FIXTURES / "t5"
TOKENIZER = OUT / "v1_0" / "tokenizer.json"
N_QUESTIONS = 10
TEMPERATURES = [1.0, 1.7]


def train_tokenizer(path):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    rows = hotpot_rows()[100:300]
    texts = ["".join(s) for r in rows for _, s in r["context"]] + [r["question"] for r in rows]
    # ASCII only: the trainer scores rare characters in an order that varies from run
    # to run; other characters become <unk>.
    texts = [t.encode("ascii", "ignore").decode() for t in texts]
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.UnigramTrainer(vocab_size=800, special_tokens=["<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>", shrinking_factor=0.75)
    tok.train_from_iterator(texts, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", 1)])
    # The trainer's float sums vary in their last digits from run to run, and with them
    # the order of pieces of equal score: rounded scores, then pieces by score and text
    # after the three special tokens, make the file (and the goldens) reproducible.
    doc = json.loads(tok.to_str())
    vocab = [[piece, round(score, 6)] for piece, score in doc["model"]["vocab"]]
    doc["model"]["vocab"] = vocab[:3] + sorted(vocab[3:], key=lambda v: (-v[1], v[0]))
    path.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    return Tokenizer.from_file(str(path))


def hf_tokenizer(path):
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_file=str(path), eos_token="</s>", pad_token="<pad>",
                                   unk_token="<unk>")


def randomize(model, seed):
    """Larger weights than T5's initialisation so that every part shows in the scores:
    norm weights 1 ± 0.2, bias tables N(0, 1), other matrices N(0, 0.15²)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "layer_norm" in name:
                p.copy_(1.0 + 0.2 * noise)
            elif "relative_attention_bias" in name:
                p.copy_(noise)
            else:
                p.copy_(0.15 * noise)


def real_config(model_config, **keys):
    """config.json as the published T5 checkpoints write it."""
    c = model_config
    out = {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
        "vocab_size": c.vocab_size, "d_model": c.d_model, "d_kv": c.d_kv, "d_ff": c.d_ff,
        "num_layers": c.num_layers, "num_decoder_layers": c.num_decoder_layers,
        "num_heads": c.num_heads, "relative_attention_num_buckets": c.relative_attention_num_buckets,
        "relative_attention_max_distance": c.relative_attention_max_distance,
        "dropout_rate": 0.1, "layer_norm_epsilon": c.layer_norm_epsilon,
        "initializer_factor": 1.0, "feed_forward_proj": c.feed_forward_proj,
        "is_encoder_decoder": True, "pad_token_id": 0, "eos_token_id": 1,
        "decoder_start_token_id": 0,
    }
    out.update(keys)
    return out


def build(name, vocab, seed, shards, **cfg):
    from safetensors.torch import save_file
    from transformers import T5Config, T5ForConditionalGeneration

    tied = cfg.pop("tied")
    config = T5Config(vocab_size=vocab, decoder_start_token_id=0, pad_token_id=0, eos_token_id=1,
                      tie_word_embeddings=tied, **cfg)
    torch.manual_seed(seed)
    model = T5ForConditionalGeneration(config)
    if not tied:
        # Untie as the v1.1 checkpoints are (see the module docstring).
        model.lm_head = torch.nn.Linear(config.d_model, vocab, bias=False)
    randomize(model, seed)
    model.config.scale_decoder_outputs = tied
    model.eval()
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()
             if not k.endswith("embed_tokens.weight") and (k != "lm_head.weight" or not tied)}
    if shards == 1:
        save_file(state, str(d / "model.safetensors"), metadata={"format": "pt"})
    else:
        names = sorted(state)
        half = len(names) // 2
        weight_map = {}
        for i, part in enumerate([names[:half], names[half:]]):
            file = f"model-{i + 1:05d}-of-00002.safetensors"
            save_file({k: state[k] for k in part}, str(d / file), metadata={"format": "pt"})
            weight_map.update({k: file for k in part})
        index = {"metadata": {"total_size": sum(v.numel() * 4 for v in state.values())},
                 "weight_map": weight_map}
        (d / "model.safetensors.index.json").write_text(json.dumps(index, indent=1) + "\n")
    extra = {} if tied else {"tie_word_embeddings": False}
    (d / "config.json").write_text(json.dumps(real_config(config, **extra), indent=1) + "\n")
    if d / "tokenizer.json" != TOKENIZER:
        (d / "tokenizer.json").write_text(TOKENIZER.read_text())
    return model


def v1_0(vocab):
    return build("v1_0", vocab, 11, 1, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2,
                 num_heads=4, relative_attention_num_buckets=32, relative_attention_max_distance=128,
                 feed_forward_proj="relu", tied=True)


def v1_1(vocab):
    return build("v1_1", vocab, 12, 2, d_model=32, d_kv=12, d_ff=48, num_layers=2, num_decoder_layers=3,
                 num_heads=3, relative_attention_num_buckets=16, relative_attention_max_distance=40,
                 feed_forward_proj="gated-gelu", tied=False)


def prompts(rows):
    from make_lepus_goldens import instruction_templates, render

    template = instruction_templates("after", 1)[0]
    out = []
    for r in rows:
        question = r["question"] if r["question"].endswith("?") else r["question"] + "?"
        texts = ["".join(s) for _, s in r["context"]][:3]
        for docs in ([texts[0]], [texts[1]], [texts[0], texts[1]], [texts[2], texts[0]]):
            out.append((render(template, docs), question))
    return out


def score(model, enc, labels, temperature):
    """Per-token log-probabilities of the labels, as score_prompt_batch computes them
    (logits of `model(input_ids, labels=labels)`, / T, log-softmax at the label)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([enc]), labels=torch.tensor([labels])).logits[0]
    logp = torch.log_softmax(logits.double() / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(labels)[:, None])[:, 0].tolist()


def buckets():
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-700, 701)
    out = {}
    for n, dist in [(32, 128), (16, 40)]:
        for bidirectional in [True, False]:
            b = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=n,
                                                      max_distance=dist)
            out[f"{n}_{dist}_{'bidirectional' if bidirectional else 'causal'}"] = b.tolist()
    return out


def main():
    torch.set_num_threads(2)
    TOKENIZER.parent.mkdir(parents=True, exist_ok=True)
    vocab = train_tokenizer(TOKENIZER).get_vocab_size()
    tok = hf_tokenizer(TOKENIZER)
    rows = hotpot_rows()[:N_QUESTIONS]
    cases = prompts(rows)
    golden = {"dataset": "hotpot_dev_distractor_sample600", "questions": [r["_id"] for r in rows],
              "temperatures": TEMPERATURES, "buckets": buckets(), "models": {}}
    for name, make in [("v1_0", v1_0), ("v1_1", v1_1)]:
        model = make(vocab).double()
        seqs = []
        for prompt, question in cases:
            enc, labels = tok(prompt)["input_ids"], tok(question)["input_ids"]
            assert enc[-1] == 1 and labels[-1] == 1, "the tokenizer appends </s>"
            seqs.append({"encoder": enc, "labels": labels,
                         "logprobs": [score(model, enc, labels, t) for t in TEMPERATURES]})
        golden["models"][name] = seqs
        longest = max(len(s["encoder"]) for s in seqs)
        print(f"{name}: {len(seqs)} prompts, encoder inputs up to {longest} tokens")
    (OUT / "logprobs.json").write_text(json.dumps(golden) + "\n")


if __name__ == "__main__":
    main()
