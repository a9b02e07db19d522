#!/usr/bin/env python3
"""Goldens for the causal-LM decoders (tests/decoder_parity.rs, tests/gguf_dequant.rs).

Run by hand, never in CI (needs torch, transformers, safetensors, numpy, gguf):

    python3 tools/goldens/make_decoder_goldens.py

Writes:
- tests/fixtures/decoder/<case>/{config.json, model.safetensors, golden.safetensors}
  for tiny random GPT-2, Llama (GQA, untied head, llama3 RoPE scaling), Qwen2
  (q/k/v bias, tied head) and Qwen3 (q_norm/k_norm, head_dim 16 on a hidden size of
  48, untied head; `python3 tools/goldens/make_decoder_goldens.py qwen3` alone) checkpoints: `input_ids`, `attention_mask` (right padding)
  and per-token log-probabilities `logprobs` (T = 1) and `logprobs_t1.4` (T = 1.4);
  `logprobs[b, t]` is log P(input_ids[b, t+1] | input_ids[b, :t+1]).
- tests/fixtures/decoder/smollm2_lepus/{refs.json, golden.safetensors}: HF
  transformers on the SmolLM2-135M-Instruct GGUF (weights/smollm2/, fetched by
  tools/fetch_smollm2.sh) scoring LEPUS-style prompt/question pairs built from
  $HOPSCORE_DATA/hotpot_dev_distractor_sample600.json.gz. Only references (question
  id, passage index) are committed; the test rebuilds the texts of the 16 whose
  question is in tests/fixtures/data.
- tests/fixtures/gguf/dequant.safetensors: random blocks of every supported ggml type
  (`<TYPE>.raw`, u8) and their dequantisation by the `gguf` package (`<TYPE>.f32`).
"""

import json
import sys

from common import FIXTURES, hotpot_rows, lepus_prompt, offline, require_smollm2

offline()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import save_file  # noqa: E402

OUT = FIXTURES / "decoder"
TEMPERATURES = {"logprobs": 1.0, "logprobs_t1.4": 1.4}


def randomize(model, seed):
    """Re-initialise with larger weights than HF's 0.02 so log-probs spread out."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            if "norm" in name or "ln_" in name:
                p.copy_(1.0 + 0.2 * noise) if name.endswith("weight") else p.copy_(0.1 * noise)
            elif name.endswith("bias"):
                p.copy_(0.2 * noise)
            else:
                p.copy_(0.15 * noise)


def per_token_logprobs(model, ids, mask, temperature):
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
    logp = torch.log_softmax(logits[:, :-1] / temperature, dim=-1)
    return logp.gather(-1, ids[:, 1:, None])[..., 0]


def tiny_case(name, model, vocab, lengths, seed):
    d = OUT / name
    d.mkdir(parents=True, exist_ok=True)
    randomize(model, seed)
    model.eval()
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        (d / extra).unlink(missing_ok=True)
    g = torch.Generator().manual_seed(seed + 1)
    L = max(lengths)
    ids = torch.zeros(len(lengths), L, dtype=torch.long)
    mask = torch.zeros(len(lengths), L, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(0, vocab, (n,), generator=g)
        mask[b, :n] = 1
    golden = {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    for key, t in TEMPERATURES.items():
        golden[key] = per_token_logprobs(model, ids, mask, t).numpy().astype(np.float32)
    save_file(golden, str(d / "golden.safetensors"))
    size = sum(f.stat().st_size for f in d.iterdir())
    print(f"{name}: {size} bytes, logprob range {golden['logprobs'].min():.2f}..{golden['logprobs'].max():.2f}")


def tiny_cases():
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    tiny_case(
        "gpt2",
        GPT2LMHeadModel(GPT2Config(vocab_size=211, n_embd=64, n_layer=2, n_head=4, n_positions=64)),
        211,
        [17, 9, 30],
        1,
    )
    tiny_case(
        "llama_gqa_untied",
        LlamaForCausalLM(
            LlamaConfig(
                vocab_size=199,
                hidden_size=64,
                intermediate_size=96,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                max_position_embeddings=64,
                tie_word_embeddings=False,
                rms_norm_eps=1e-5,
                rope_parameters={
                    "rope_type": "llama3",
                    "rope_theta": 500000.0,
                    "factor": 8.0,
                    "low_freq_factor": 1.0,
                    "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 16,
                },
            ),
        ),
        199,
        [23, 5, 31],
        2,
    )
    tiny_case(
        "qwen2_bias_tied",
        Qwen2ForCausalLM(
            Qwen2Config(
                vocab_size=157,
                hidden_size=48,
                intermediate_size=80,
                num_hidden_layers=2,
                num_attention_heads=6,
                num_key_value_heads=2,
                max_position_embeddings=64,
                tie_word_embeddings=True,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            ),
        ),
        157,
        [12, 26],
        3,
    )


def qwen3_case():
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    tiny_case(
        "qwen3_qk_norm",
        Qwen3ForCausalLM(
            Qwen3Config(
                vocab_size=163,
                hidden_size=48,
                intermediate_size=80,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                head_dim=16,
                max_position_embeddings=64,
                tie_word_embeddings=False,
                rope_parameters={"rope_type": "default", "rope_theta": 1000000.0},
            ),
        ),
        163,
        [19, 7, 28],
        4,
    )


def smollm2_case(n_pairs=24):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wdir, gguf_name = require_smollm2()
    rows = hotpot_rows()
    tok = AutoTokenizer.from_pretrained(str(wdir), gguf_file=gguf_name)
    model = AutoModelForCausalLM.from_pretrained(str(wdir), gguf_file=gguf_name, dtype=torch.float32)
    model.eval()
    add_bos = bool(getattr(tok, "add_bos_token", False))
    refs, ids_all, lens, tstarts, logps = [], [], [], [], []
    for r in rows[:n_pairs]:
        gold_titles = [t for t, _ in r["supporting_facts"]]
        p = next(i for i, (t, _) in enumerate(r["context"]) if t in gold_titles)
        title, sents = r["context"][p]
        prompt = lepus_prompt(title, sents)
        target = " " + r["question"]
        pi = tok(prompt, add_special_tokens=False)["input_ids"]
        ti = tok(target, add_special_tokens=False)["input_ids"]
        if add_bos:
            pi = [tok.bos_token_id] + pi
        ids = torch.tensor([pi + ti])
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()[0]
        logp = torch.log_softmax(logits[:-1], dim=-1).gather(-1, ids[0, 1:, None])[:, 0]
        refs.append({"dataset": "hotpot_dev_distractor_sample600", "_id": r["_id"], "passage": p})
        ids_all += pi + ti
        lens.append(len(pi) + len(ti))
        tstarts.append(len(pi))
        logps += logp[len(pi) - 1 :].tolist()
    d = OUT / "smollm2_lepus"
    d.mkdir(parents=True, exist_ok=True)
    (d / "refs.json").write_text(json.dumps({"add_bos": add_bos, "pairs": refs}, indent=1) + "\n")
    save_file(
        {
            "ids": np.array(ids_all, dtype=np.int64),
            "lengths": np.array(lens, dtype=np.int64),
            "target_start": np.array(tstarts, dtype=np.int64),
            "target_logprobs": np.array(logps, dtype=np.float32),
        },
        str(d / "golden.safetensors"),
    )
    print(f"smollm2_lepus: {len(refs)} pairs, {len(logps)} target tokens, {sum(lens)} tokens")


def dequant_case():
    from gguf import GGMLQuantizationType as T
    from gguf import GGML_QUANT_SIZES
    from gguf.quants import dequantize

    rng = np.random.default_rng(5)
    # (type, byte offsets of the f16 scale fields inside a block)
    types = {
        "F32": (T.F32, []),
        "F16": (T.F16, []),
        "BF16": (T.BF16, []),
        "Q8_0": (T.Q8_0, [0]),
        "Q4_0": (T.Q4_0, [0]),
        "Q4_1": (T.Q4_1, [0, 2]),
        "Q4_K": (T.Q4_K, [0, 2]),
        "Q5_K": (T.Q5_K, [0, 2]),
        "Q6_K": (T.Q6_K, [208]),
        "Q5_0": (T.Q5_0, [0]),
        "Q5_1": (T.Q5_1, [0, 2]),
    }
    out = {}
    for name, (qt, f16_fields) in types.items():
        block, size = GGML_QUANT_SIZES[qt]
        n_blocks = 4 if block > 1 else 64
        if qt == T.F32:
            raw = rng.standard_normal(n_blocks).astype(np.float32).view(np.uint8)
        elif qt == T.F16:
            raw = rng.standard_normal(n_blocks).astype(np.float16).view(np.uint8)
        elif qt == T.BF16:
            raw = (rng.standard_normal(n_blocks).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
        else:
            raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
            for off in f16_fields:
                scale = (rng.standard_normal(n_blocks) * 0.05).astype(np.float16)
                raw[:, off : off + 2] = scale.view(np.uint8).reshape(n_blocks, 2)
            raw = raw.reshape(-1)
        deq = dequantize(raw.reshape(1, -1), qt).reshape(-1).astype(np.float32)
        out[f"{name}.raw"] = raw.copy()
        out[f"{name}.f32"] = deq
    d = FIXTURES / "gguf"
    d.mkdir(parents=True, exist_ok=True)
    save_file(out, str(d / "dequant.safetensors"))
    print(f"gguf dequant: {len(types)} types")


if __name__ == "__main__":
    which = sys.argv[1:] or ["tiny", "smollm2", "dequant"]
    if "tiny" in which:
        tiny_cases()
    if "tiny" in which or "qwen3" in which:
        qwen3_case()
    if "dequant" in which:
        dequant_case()
    if "smollm2" in which:
        smollm2_case()
