#!/usr/bin/env python3
"""Independent float64 NumPy re-implementation of the HF DeBERTa-v2/v3 forward pass.

It reads a fixture folder written by ``tools/goldens/make_goldens.py`` (config.json,
model.safetensors, golden.safetensors), recomputes ``last_hidden_state`` and every
``logits.<head>`` with plain NumPy, and compares with the goldens. It is a
readable statement of the math that hopscore must reproduce, and a check that
the goldens are what we think they are (not just "whatever HF printed").

    python3 tools/goldens/numpy_deberta.py                 # all cases
    python3 tools/goldens/numpy_deberta.py v3_seqcls --ablate

``--ablate`` also reports how far the output moves when one ingredient is left
out (c2p, p2c, log buckets, ...), i.e. how sensitive the goldens are to it.

Needs numpy only (it reads safetensors itself; no torch).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

from common import FIXTURES as ALL_FIXTURES

FIXTURES = ALL_FIXTURES / "deberta"
F32_MIN = float(np.finfo(np.float32).min)
_erf = np.vectorize(math.erf, otypes=[np.float64])


_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def load_file(path: str) -> dict:
    """Minimal safetensors reader (so BF16 works without torch): name -> numpy array."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    data = memoryview(raw)[8 + n :]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        lo, hi = info["data_offsets"]
        buf = data[lo:hi]
        if info["dtype"] == "BF16":  # bfloat16 = upper half of a float32
            arr = (np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            arr = np.frombuffer(buf, dtype=_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"])
    return out


def gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def layer_norm(x, w, b, eps):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w + b


def linear(x, W, b=None):
    y = x @ W.T
    return y if b is None else y + b


def log_bucket(rel, bucket_size, max_position):
    """HF make_log_bucket_position, evaluated in float32 as torch does."""
    rel = np.asarray(rel, dtype=np.int64)
    mid = bucket_size // 2
    sign = np.sign(rel)
    abs_pos = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    ratio = (abs_pos.astype(np.float32) / np.float32(mid)).astype(np.float32)
    denom = np.log(np.float32((max_position - 1) / mid)).astype(np.float32)
    log_pos = np.ceil((np.log(ratio).astype(np.float32) / denom).astype(np.float32) * np.float32(mid - 1)) + mid
    out = np.where(abs_pos <= mid, rel.astype(np.float32), (log_pos * sign).astype(np.float32))
    return out.astype(np.int64)


class Deberta:
    def __init__(self, folder: Path, ablate: str | None = None):
        self.cfg = json.loads((folder / "config.json").read_text())
        raw = load_file(str(folder / "model.safetensors"))
        # fp16 / bf16 checkpoints are upcast (the goldens were computed from the rounded weights)
        self.w = {}
        for k, v in raw.items():
            self.w[k.removeprefix("module.")] = v.astype(np.float64)
        self.ablate = ablate
        if "embeddings.word_embeddings.weight" in self.w:
            self.base = ""
        elif "deberta.embeddings.word_embeddings.weight" in self.w:
            self.base = "deberta."
        elif "encoder.embeddings.word_embeddings.weight" in self.w:
            self.base = "encoder."
        else:
            raise ValueError("cannot find the embeddings")

    def p(self, name):
        return self.w[self.base + name]

    def has(self, name):
        return (self.base + name) in self.w

    # ------------------------------------------------------------------ encoder
    def encode(self, ids, mask, types):
        c = self.cfg
        B, L = ids.shape
        H, nh = c["hidden_size"], c["num_attention_heads"]
        d = H // nh
        eps = c["layer_norm_eps"]
        maskf = mask.astype(np.float64)

        x = self.p("embeddings.word_embeddings.weight")[ids]
        if c.get("position_biased_input", True):
            x = x + self.p("embeddings.position_embeddings.weight")[np.arange(L)][None]
        if c.get("type_vocab_size", 0) > 0:
            x = x + self.p("embeddings.token_type_embeddings.weight")[types]
        x = layer_norm(x, self.p("embeddings.LayerNorm.weight"), self.p("embeddings.LayerNorm.bias"), eps)
        x = x * maskf[..., None]

        pos_types = c.get("pos_att_type") or []
        if isinstance(pos_types, str):
            pos_types = [t.strip() for t in pos_types.lower().split("|")]
        rel_att = c.get("relative_attention", False)
        # NB: the scale counts pos_att_type entries even when relative_attention is off
        scale = math.sqrt(d * (1 + ("c2p" in pos_types) + ("p2c" in pos_types)))
        if self.ablate == "plain_scale":
            scale = math.sqrt(d)

        if rel_att:
            max_rel = c.get("max_relative_positions", -1)
            if max_rel < 1:
                max_rel = c["max_position_embeddings"]
            buckets = c.get("position_buckets", -1)
            span = buckets if buckets > 0 else max_rel
            rel = self.p("encoder.rel_embeddings.weight")
            norm = [t.strip() for t in c.get("norm_rel_ebd", "none").lower().split("|")]
            if "layer_norm" in norm and self.ablate != "no_rel_ln":
                rel = layer_norm(rel, self.p("encoder.LayerNorm.weight"), self.p("encoder.LayerNorm.bias"), eps)
            rel = rel[: 2 * span]
            r = np.arange(L)[:, None] - np.arange(L)[None, :]  # query i - key j
            if buckets > 0 and self.ablate != "no_buckets":
                r = log_bucket(r, buckets, max_rel)
            idx = np.clip(r + span, 0, 2 * span - 1)  # [L, L], same index for c2p and p2c

        # [B, 1, L, L]: query i may see key j iff both are real tokens
        allowed = (maskf[:, None, :, None] * maskf[:, None, None, :]) > 0

        def heads(t):  # [B, L, H] -> [B, nh, L, d]
            return t.reshape(t.shape[0], -1, nh, d).transpose(0, 2, 1, 3)

        for i in range(c["num_hidden_layers"]):
            pre = f"encoder.layer.{i}."
            a = pre + "attention.self."
            q = heads(linear(x, self.p(a + "query_proj.weight"), self.p(a + "query_proj.bias")))
            k = heads(linear(x, self.p(a + "key_proj.weight"), self.p(a + "key_proj.bias")))
            v = heads(linear(x, self.p(a + "value_proj.weight"), self.p(a + "value_proj.bias")))
            s = q @ k.transpose(0, 1, 3, 2) / scale
            if rel_att:
                share = c.get("share_att_key", False)
                if "c2p" in pos_types and self.ablate != "no_c2p":
                    kw = "key_proj" if share else "pos_key_proj"
                    pk = heads(linear(rel[None], self.p(a + kw + ".weight"), self.p(a + kw + ".bias")))
                    c2p = q @ pk.transpose(0, 1, 3, 2)  # [B, nh, Lq, 2span]
                    s = s + np.take_along_axis(c2p, np.broadcast_to(idx, s.shape), axis=-1) / scale
                if "p2c" in pos_types and self.ablate != "no_p2c":
                    qw = "query_proj" if share else "pos_query_proj"
                    pq = heads(linear(rel[None], self.p(a + qw + ".weight"), self.p(a + qw + ".bias")))
                    p2c = k @ pq.transpose(0, 1, 3, 2)  # [B, nh, Lk, 2span]
                    # score[i, j] += k_j . pq[idx[i, j]]
                    g = np.take_along_axis(p2c, np.broadcast_to(idx.T, s.shape), axis=-1)
                    s = s + g.transpose(0, 1, 3, 2) / scale
            s = np.where(allowed, s, F32_MIN)
            s = s - s.max(-1, keepdims=True)
            prob = np.exp(s)
            prob = prob / prob.sum(-1, keepdims=True)  # fully masked rows -> uniform 1/L
            if self.ablate == "zero_masked_rows":
                prob = np.where(allowed, prob, 0.0)  # the old XSoftmax behaviour
            ctx = (prob @ v).transpose(0, 2, 1, 3).reshape(B, L, H)
            o = pre + "attention.output."
            x = layer_norm(
                linear(ctx, self.p(o + "dense.weight"), self.p(o + "dense.bias")) + x,
                self.p(o + "LayerNorm.weight"),
                self.p(o + "LayerNorm.bias"),
                eps,
            )
            hmid = gelu(linear(x, self.p(pre + "intermediate.dense.weight"), self.p(pre + "intermediate.dense.bias")))
            x = layer_norm(
                linear(hmid, self.p(pre + "output.dense.weight"), self.p(pre + "output.dense.bias")) + x,
                self.p(pre + "output.LayerNorm.weight"),
                self.p(pre + "output.LayerNorm.bias"),
                eps,
            )
        return x

    # ------------------------------------------------------------------ heads
    def heads(self, h):
        w = self.w
        out = {}

        def pooled():
            act = self.cfg.get("pooler_hidden_act", "gelu")
            assert act == "gelu", act
            return gelu(linear(h[:, 0], w["pooler.dense.weight"], w["pooler.dense.bias"]))

        if "classifier.weight" in w:
            if "pooler.dense.weight" in w:
                out["sequence"] = linear(pooled(), w["classifier.weight"], w["classifier.bias"])
            else:
                out["token"] = linear(h, w["classifier.weight"], w["classifier.bias"])
        if "sequence_classifier.weight" in w:
            out["sequence"] = linear(pooled(), w["sequence_classifier.weight"], w["sequence_classifier.bias"])
        if "token_classifier.weight" in w:
            out["token"] = linear(h, w["token_classifier.weight"], w["token_classifier.bias"])
        if "hop_classifier_layer.weight" in w:
            out["hop1"] = linear(h[:, 0], w["hop_classifier_layer.weight"], w["hop_classifier_layer.bias"])
        if "hop_n_classifier_layer.weight" in w:
            out["hop_n"] = linear(h[:, 0], w["hop_n_classifier_layer.weight"], w["hop_n_classifier_layer.bias"])
        return out


def run_case(folder: Path, ablate: str | None = None):
    g = load_file(str(folder / "golden.safetensors"))
    model = Deberta(folder, ablate)
    h = model.encode(g["input_ids"], g["attention_mask"], g["token_type_ids"])
    outs = {"last_hidden_state": h}
    outs.update({f"logits.{k}": v for k, v in model.heads(h).items()})
    real = g["attention_mask"].astype(bool)
    report = {}
    for k, v in outs.items():
        gold = g[k].astype(np.float64)
        diff = np.abs(v - gold)
        entry = {"all": float(diff.max())}
        if k == "last_hidden_state" or k == "logits.token":
            entry["real"] = float(diff[real].max())
        report[k] = entry
    missing = sorted(k for k in g if k.startswith("logits.") and k not in outs)
    return report, missing


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="NumPy cross-check of the DeBERTa goldens")
    ap.add_argument("cases", nargs="*", help="case folders under tests/fixtures/deberta (default: all)")
    ap.add_argument("--fixtures", type=Path, default=FIXTURES)
    ap.add_argument("--tol", type=float, default=2e-4, help="max abs diff accepted")
    ap.add_argument("--ablate", action="store_true", help="also report the effect of dropping each term")
    args = ap.parse_args(argv)
    cases = args.cases or sorted(p.name for p in args.fixtures.iterdir() if (p / "golden.safetensors").exists())

    # buckets: compare the float32 formula with the stored HF values
    bk = args.fixtures / "buckets.safetensors"
    ok = True
    if bk.exists():
        mine = log_bucket(np.arange(-511, 512), 256, 512)
        same = np.array_equal(mine, load_file(str(bk))["rel_bucket_256_512"])
        print(f"buckets.safetensors: numpy float32 formula {'matches' if same else 'DIFFERS'}")
        ok &= same

    for name in cases:
        folder = args.fixtures / name
        report, missing = run_case(folder)
        worst = max(e["all"] for e in report.values())
        status = "ok" if worst <= args.tol and not missing else "FAIL"
        ok &= status == "ok"
        detail = ", ".join(f"{k} {e['all']:.1e}" for k, e in report.items())
        print(f"{name:22s} {status}  {detail}" + (f"  missing heads {missing}" if missing else ""))
        if args.ablate:
            for ab in ("no_c2p", "no_p2c", "no_buckets", "no_rel_ln", "plain_scale", "zero_masked_rows"):
                r, _ = run_case(folder, ab)
                parts = []
                for k, e in r.items():
                    parts.append(f"{k} {e['all']:.2e}" + (f" (real {e['real']:.2e})" if "real" in e else ""))
                print(f"    without {ab:17s}: " + ", ".join(parts))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
