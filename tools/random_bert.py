#!/usr/bin/env python3
"""Write a random BERT bi-encoder of a published shape, for `hopscore embed` throughput
and device-against-device comparisons (the vectors mean nothing).

    python3 tools/random_bert.py --shape minilm --files weights/all-minilm-l6-v2 --sentence-transformers -o DIR
    python3 tools/random_bert.py --shape base --files weights/all-minilm-l6-v2 -o DIR

Shapes: minilm (all-MiniLM-L6-v2: 384 wide, 6 layers, 12 heads), base (bert-base and
Contriever: 768, 12, 12); vocab 30522 (bert-base-uncased's, which MiniLM shares).
Weights: transformers' BertModel initialisation (normal, std 0.02), saved with
save_pretrained (bare `embeddings.` / `encoder.` / `pooler.` keys: Contriever's layout).
`--files DIR` copies tokenizer.json from DIR; `--sentence-transformers` also copies
modules.json, sentence_bert_config.json and 1_Pooling/config.json (mean pooling,
normalised). Needs torch and transformers.
"""

import argparse
import pathlib
import shutil

SHAPES = {"minilm": (384, 6, 12), "base": (768, 12, 12)}
ST_FILES = ["modules.json", "sentence_bert_config.json", "1_Pooling/config.json"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=SHAPES, default="minilm")
    ap.add_argument("--files", type=pathlib.Path, required=True, help="folder with tokenizer.json")
    ap.add_argument("--sentence-transformers", action="store_true")
    ap.add_argument("-o", "--out", type=pathlib.Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(args.seed)
    h, layers, heads = SHAPES[args.shape]
    config = BertConfig(vocab_size=30522, hidden_size=h, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * h)
    BertModel(config).eval().save_pretrained(args.out)
    names = ["tokenizer.json"] + (ST_FILES if args.sentence_transformers else [])
    for name in names:
        (args.out / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(args.files / name, args.out / name)
    print(f"wrote {args.out} (random BERT, {args.shape})")


if __name__ == "__main__":
    main()
