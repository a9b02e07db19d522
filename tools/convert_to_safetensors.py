#!/usr/bin/env python3
"""Convert a PyTorch checkpoint (.bin / .pt state dict) into a hopscore model directory.

hopscore reads safetensors only (memory-mapped, no pickle). This turns
`pytorch_model.bin` of an HF DeBERTa checkpoint, or the `.pt` state dict that the
official Beam Retrieval / EfficientRAG training code saves, into:

    OUT/config.json        copied from --config (or CKPT's directory)
    OUT/model.safetensors  every tensor of the state dict, names unchanged
    OUT/tokenizer.json     copied from --tokenizer when given

Names are kept as they are: hopscore strips a DataParallel `module.` prefix itself
and recognises the `deberta.` / `encoder.` / bare encoder prefixes and the heads
(`hop_classifier_layer`, `hop_n_classifier_layer`, `pooler.dense`, `classifier`,
`sequence_classifier`, `token_classifier`).

Examples:

    # Beam Retrieval checkpoint trained from microsoft/deberta-v3-large
    python3 tools/convert_to_safetensors.py beam_retriever_hotpot.pt \
        --config deberta-v3-large/config.json --tokenizer deberta-v3-large/tokenizer.json \
        -o weights/beam-hotpot
    # HF directory with pytorch_model.bin
    python3 tools/convert_to_safetensors.py my-deberta/pytorch_model.bin -o weights/my-deberta

Needs torch and safetensors (`pip install torch safetensors`). Run by hand.
"""

import argparse
import pathlib
import shutil
import sys


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoint", type=pathlib.Path, help=".bin or .pt state dict")
    ap.add_argument("-o", "--out", type=pathlib.Path, required=True, help="output directory")
    ap.add_argument("--config", type=pathlib.Path, help="config.json of the base model")
    ap.add_argument("--tokenizer", type=pathlib.Path, help="tokenizer.json to copy")
    args = ap.parse_args()

    import torch
    from safetensors.torch import save_file

    state = torch.load(args.checkpoint, map_location="cpu", weights_only=True)
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(state, dict) and key in state and isinstance(state[key], dict):
            state = state[key]
    tensors = {k: v.contiguous() for k, v in state.items() if isinstance(v, torch.Tensor)}
    skipped = sorted(set(state) - set(tensors))
    if not tensors:
        print(f"error: no tensors in {args.checkpoint}", file=sys.stderr)
        return 1
    # Tied or shared tensors must not alias in safetensors.
    seen = {}
    for k, v in tensors.items():
        ptr = v.data_ptr()
        if ptr in seen:
            tensors[k] = v.clone()
        seen[ptr] = k

    config = args.config or args.checkpoint.parent / "config.json"
    if not config.is_file():
        print(f"error: no config.json at {config}: pass --config", file=sys.stderr)
        return 1
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "model.safetensors"))
    shutil.copy(config, args.out / "config.json")
    if args.tokenizer:
        shutil.copy(args.tokenizer, args.out / "tokenizer.json")
    n = sum(v.numel() for v in tensors.values())
    print(f"wrote {len(tensors)} tensors ({n / 1e6:.1f} M parameters) to {args.out}")
    if skipped:
        print(f"skipped non-tensor entries: {', '.join(skipped)}")
    print(f"check it with: hopscore inspect --model {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
