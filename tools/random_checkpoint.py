#!/usr/bin/env python3
"""Write a random Beam Retrieval or EfficientRAG checkpoint of a published DeBERTa-v3 shape.

For throughput measurements and device-against-device comparisons only (the scores mean
nothing): `hopscore beam` and `hopscore label` need model directories, and no registry
ships trained Beam Retrieval or EfficientRAG weights.

    python3 tools/random_checkpoint.py --shape base -o weights/beam-random-base
    python3 tools/random_checkpoint.py --kind labeler --shape base -o weights/labeler-random-base
    python3 tools/random_checkpoint.py --kind filter --shape base -o weights/filter-random-base

Shapes: small (hidden 256, 4 layers, 4 heads), base (768, 12, 12), large (1024, 24, 16);
vocab 128100, v3 relative attention. Keys, as the official code saves them:
- beam: `encoder.*`, `hop_classifier_layer.*`, `hop_n_classifier_layer.*`;
- labeler (EfficientRAG Labeler): `deberta.*`, `pooler.dense.*`, `sequence_classifier.*`
  (2 tags), `token_classifier.*` (2 labels);
- filter (EfficientRAG Filter, DebertaV2ForTokenClassification): `deberta.*`,
  `classifier.*` (2 labels).
Needs numpy only.
"""

import argparse
import json
import pathlib
import struct

import numpy as np

SHAPES = {"small": (256, 4, 4), "base": (768, 12, 12), "large": (1024, 24, 16)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", choices=("beam", "labeler", "filter"), default="beam")
    ap.add_argument("--shape", choices=SHAPES, default="base")
    ap.add_argument("-o", "--out", type=pathlib.Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    h, layers, heads = SHAPES[args.shape]
    config = {
        "model_type": "deberta-v2", "vocab_size": 128100, "hidden_size": h,
        "num_hidden_layers": layers, "num_attention_heads": heads, "intermediate_size": 4 * h,
        "hidden_act": "gelu", "max_position_embeddings": 512, "type_vocab_size": 0,
        "layer_norm_eps": 1e-7, "relative_attention": True, "max_relative_positions": -1,
        "position_buckets": 256, "pos_att_type": ["p2c", "c2p"], "share_att_key": True,
        "norm_rel_ebd": "layer_norm", "position_biased_input": False,
    }
    rng = np.random.default_rng(args.seed)
    tensors = {}

    def lin(name, i, o):
        tensors[f"{name}.weight"] = rng.normal(0, 0.02, (o, i)).astype(np.float32)
        tensors[f"{name}.bias"] = np.zeros(o, np.float32)

    def ln(name):
        tensors[f"{name}.weight"] = np.ones(h, np.float32)
        tensors[f"{name}.bias"] = np.zeros(h, np.float32)

    if args.kind != "beam":
        config.update(pooler_hidden_size=h, pooler_hidden_act="gelu", pooler_dropout=0.0,
                      id2label={"0": "LABEL_0", "1": "LABEL_1"}, label2id={"LABEL_0": 0, "LABEL_1": 1})
    if args.kind == "filter":
        config["architectures"] = ["DebertaV2ForTokenClassification"]
    e = "encoder." if args.kind == "beam" else "deberta."
    tensors[e + "embeddings.word_embeddings.weight"] = rng.normal(0, 0.02, (128100, h)).astype(np.float32)
    ln(e + "embeddings.LayerNorm")
    tensors[e + "encoder.rel_embeddings.weight"] = rng.normal(0, 0.02, (512, h)).astype(np.float32)
    ln(e + "encoder.LayerNorm")
    for i in range(layers):
        p = f"{e}encoder.layer.{i}."
        for proj in ("query_proj", "key_proj", "value_proj"):
            lin(p + "attention.self." + proj, h, h)
        lin(p + "attention.output.dense", h, h)
        ln(p + "attention.output.LayerNorm")
        lin(p + "intermediate.dense", h, 4 * h)
        lin(p + "output.dense", 4 * h, h)
        ln(p + "output.LayerNorm")
    if args.kind == "beam":
        lin("hop_classifier_layer", h, 2)
        lin("hop_n_classifier_layer", h, 2)
    elif args.kind == "labeler":
        lin("pooler.dense", h, h)
        lin("sequence_classifier", h, 2)
        lin("token_classifier", h, 2)
    else:
        lin("classifier", h, 2)

    # safetensors: 8-byte header length, JSON header, raw little-endian data.
    header, offset = {}, 0
    for k, v in tensors.items():
        header[k] = {"dtype": "F32", "shape": list(v.shape), "data_offsets": [offset, offset + v.nbytes]}
        offset += v.nbytes
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for v in tensors.values():
            f.write(v.tobytes())
    (args.out / "config.json").write_text(json.dumps(config, indent=2))
    n = sum(v.size for v in tensors.values())
    print(f"wrote {args.out} ({n / 1e6:.1f} M parameters, random {args.kind}, {args.shape})")


if __name__ == "__main__":
    main()
