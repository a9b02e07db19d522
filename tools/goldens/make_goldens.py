#!/usr/bin/env python3
"""Generate small random DeBERTa-v2/v3 checkpoints and golden outputs.

Run by hand (never in CI), from the repository root:

    python3 tools/goldens/make_goldens.py

Options: ``--out DIR`` (default ``tests/fixtures/deberta``), ``--check`` (only
recompute every case and compare against the files already on disk, writing
nothing).

Requirements: torch, transformers (``transformers.models.deberta_v2``),
safetensors, numpy. Everything is generated from random weights with fixed
seeds, in fp32, eval mode, on CPU; no model hub is contacted.

Layout written, one folder per case under ``tests/fixtures/deberta/<case>/``:

* ``config.json``        the HF ``DebertaV2Config`` (model_type "deberta-v2").
* ``model.safetensors``  the checkpoint, with the key naming of that case.
* ``golden.safetensors`` ``input_ids``, ``attention_mask``, ``token_type_ids``
  (int64 [B, L]), ``last_hidden_state`` (float32 [B, L, H]) and one
  ``logits.<head>`` float32 tensor per head.

plus ``tests/fixtures/deberta/buckets.safetensors`` holding
``rel_bucket_256_512`` (int64 [1023]): HF's ``make_log_bucket_position`` for
relative positions -511..511 with bucket_size=256, max_position=512.

See ``tests/fixtures/deberta/README.md`` for the description of every case.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from common import DEBERTA_V3_ATTENTION, FIXTURES, offline

offline()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from torch import nn  # noqa: E402

import transformers  # noqa: E402
from transformers import DebertaV2Config  # noqa: E402
from transformers.models.deberta_v2 import modeling_deberta_v2 as hf  # noqa: E402
from beam_model import BeamRetriever  # noqa: E402

DEFAULT_OUT = FIXTURES / "deberta"

# Token ids used to build the inputs (the layout of a DeBERTa-v3 vocabulary).
PAD_ID, CLS_ID, SEP_ID = 0, 1, 2
FIRST_RANDOM_ID = 3
VOCAB = 1000
LENGTHS = [300, 137, 9]  # real lengths of the 3 rows; > 256 exercises log buckets
SEQ_LEN = 300  # padded length

# --------------------------------------------------------------------------------------
# configs

SMALL = dict(
    hidden_size=32,
    num_attention_heads=4,
    num_hidden_layers=2,
    intermediate_size=64,
    vocab_size=VOCAB,
    max_position_embeddings=512,
    layer_norm_eps=1e-7,
    hidden_act="gelu",
    pooler_hidden_act="gelu",
    pad_token_id=PAD_ID,
)

V3 = dict(SMALL, **DEBERTA_V3_ATTENTION, type_vocab_size=0)

V2 = dict(
    SMALL,
    relative_attention=True,
    position_buckets=-1,
    max_relative_positions=128,
    pos_att_type=["c2p", "p2c"],
    share_att_key=False,
    norm_rel_ebd="none",
    position_biased_input=True,
    type_vocab_size=2,
)

# v3 with relative attention switched off. Everything else (pos_att_type,
# norm_rel_ebd, position_biased_input=False) is kept on purpose: HF still
# scales the scores by sqrt(head_dim * 3) because pos_att_type lists two
# terms, and still creates (unused) encoder.LayerNorm.* weights.
V3_NOREL = dict(V3, relative_attention=False)


# --------------------------------------------------------------------------------------
# models that are not HF classes


class EfficientRagLabelerRef(nn.Module):
    """EfficientRAG labeler: DeBERTa + ContextPooler -> sequence head, token head on every token."""

    def __init__(self, config: DebertaV2Config):
        super().__init__()
        self.deberta = hf.DebertaV2Model(config)
        self.pooler = hf.ContextPooler(config)
        self.sequence_classifier = nn.Linear(config.hidden_size, 2)
        self.token_classifier = nn.Linear(config.hidden_size, 2)

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.deberta(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
        ).last_hidden_state
        return h, {
            "sequence": self.sequence_classifier(self.pooler(h)),
            "token": self.token_classifier(h),
        }


def run_hf_seqcls(model, input_ids, attention_mask, token_type_ids):
    kw = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    h = model.deberta(**kw).last_hidden_state
    return h, {"sequence": model(**kw).logits}


def run_hf_token(model, input_ids, attention_mask, token_type_ids):
    kw = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
    h = model.deberta(**kw).last_hidden_state
    return h, {"token": model(**kw).logits}


def run_bare(model, input_ids, attention_mask, token_type_ids):
    h = model(
        input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
    ).last_hidden_state
    return h, {}


def run_custom(model, input_ids, attention_mask, token_type_ids):
    return model(input_ids, attention_mask, token_type_ids)


# --------------------------------------------------------------------------------------
# cases


@dataclass
class Case:
    name: str
    seed: int
    config: dict
    build: object  # callable(config) -> nn.Module
    run: object  # callable(model, ids, mask, types) -> (hidden, {head: logits})
    architectures: list | None = None
    num_labels: int = 2
    store_dtype: torch.dtype = torch.float32
    key_prefix: str = ""
    pair_token_types: bool = False  # token_type_ids = 0 for segment A, 1 for segment B
    beam_mask_quirk: bool = False  # last [SEP] of every row gets attention_mask 0
    heads: dict = field(default_factory=dict)  # head name -> description (README)


CASES = [
    Case(
        name="v3_seqcls",
        seed=1001,
        config=V3,
        build=hf.DebertaV2ForSequenceClassification,
        run=run_hf_seqcls,
        architectures=["DebertaV2ForSequenceClassification"],
        num_labels=3,
        heads={"sequence": "[B,3] classifier(pooler(h))"},
    ),
    Case(
        name="v3_seqcls_gelu_tanh",
        seed=1007,
        config=dict(V3, hidden_act="gelu_new"),
        build=hf.DebertaV2ForSequenceClassification,
        run=run_hf_seqcls,
        architectures=["DebertaV2ForSequenceClassification"],
        num_labels=3,
        heads={"sequence": "[B,3] classifier(pooler(h)), tanh GELU in the FFN"},
    ),
    Case(
        name="v3_token_f16",
        seed=1002,
        config=V3,
        build=hf.DebertaV2ForTokenClassification,
        run=run_hf_token,
        architectures=["DebertaV2ForTokenClassification"],
        num_labels=2,
        store_dtype=torch.float16,
        heads={"token": "[B,L,2] classifier(h)"},
    ),
    Case(
        name="v2_seqcls_bf16",
        seed=1003,
        config=V2,
        build=hf.DebertaV2ForSequenceClassification,
        run=run_hf_seqcls,
        architectures=["DebertaV2ForSequenceClassification"],
        num_labels=2,
        store_dtype=torch.bfloat16,
        pair_token_types=True,
        heads={"sequence": "[B,2] classifier(pooler(h))"},
    ),
    Case(
        name="beam_retrieval",
        seed=1004,
        config=V3,
        build=BeamRetriever,
        run=run_custom,
        key_prefix="module.",
        beam_mask_quirk=True,
        heads={
            "hop1": "[B,2] hop_classifier_layer(h[:,0])",
            "hop_n": "[B,2] hop_n_classifier_layer(h[:,0])",
        },
    ),
    Case(
        name="efficientrag_labeler",
        seed=1005,
        config=V3,
        build=EfficientRagLabelerRef,
        run=run_custom,
        heads={
            "sequence": "[B,2] sequence_classifier(pooler(h))",
            "token": "[B,L,2] token_classifier(h)",
        },
    ),
    Case(
        name="v3_norel",
        seed=1006,
        config=V3_NOREL,
        build=hf.DebertaV2Model,
        run=run_bare,
        architectures=["DebertaV2Model"],
        heads={},
    ),
]


# --------------------------------------------------------------------------------------
# helpers


def make_config(case: Case) -> DebertaV2Config:
    kw = dict(case.config)
    kw["num_labels"] = case.num_labels
    config = DebertaV2Config(**kw)
    if case.architectures:
        config.architectures = list(case.architectures)
    config.dtype = case.store_dtype  # written as "dtype": "float16" etc., like save_pretrained
    return config


@torch.no_grad()
def randomize(model: nn.Module, gen: torch.Generator) -> None:
    """Re-initialise every parameter with a large spread so that every term matters.

    Linear / Embedding weights and biases: N(0, 0.2); LayerNorm weight 1 + N(0, 0.1),
    LayerNorm bias N(0, 0.1). Modules are visited in named_modules() order, so the
    result depends only on the generator seed.
    """
    for _, module in model.named_modules():
        if isinstance(module, nn.LayerNorm):
            if module.weight is not None:
                module.weight.copy_(1.0 + 0.1 * torch.randn(module.weight.shape, generator=gen))
            if module.bias is not None:
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=gen))
        elif isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.copy_(0.2 * torch.randn(module.weight.shape, generator=gen))
            bias = getattr(module, "bias", None)
            if bias is not None:
                bias.copy_(0.2 * torch.randn(bias.shape, generator=gen))
    # Any parameter of another kind would be left at its default: refuse that.
    known = set()
    for _, module in model.named_modules():
        if isinstance(module, (nn.LayerNorm, nn.Linear, nn.Embedding)):
            known.update(id(p) for p in module.parameters(recurse=False))
    unknown = [n for n, p in model.named_parameters() if id(p) not in known]
    if unknown:
        raise RuntimeError(f"parameters not covered by randomize(): {unknown}")


@torch.no_grad()
def round_to(model: nn.Module, dtype: torch.dtype) -> None:
    """Round every parameter to `dtype` and back to fp32 (goldens use the rounded weights)."""
    if dtype == torch.float32:
        return
    for p in model.parameters():
        p.copy_(p.to(dtype).to(torch.float32))


def make_inputs(case: Case, gen: torch.Generator):
    b = len(LENGTHS)
    ids = torch.full((b, SEQ_LEN), PAD_ID, dtype=torch.int64)
    mask = torch.zeros((b, SEQ_LEN), dtype=torch.int64)
    types = torch.zeros((b, SEQ_LEN), dtype=torch.int64)
    for row, n in enumerate(LENGTHS):
        ids[row, :n] = torch.randint(FIRST_RANDOM_ID, VOCAB, (n,), generator=gen)
        ids[row, 0] = CLS_ID
        ids[row, n - 1] = SEP_ID
        # pair layout: [CLS] a.. [SEP] b.. [SEP]; the middle [SEP] closes segment A
        mid = max(1, n // 3)
        if n >= 4:
            ids[row, mid] = SEP_ID
        if case.beam_mask_quirk:
            mask[row, : n - 1] = 1  # Beam Retrieval masks out the final [SEP]
        else:
            mask[row, :n] = 1
        if case.pair_token_types and n >= 4:
            types[row, mid + 1 : n] = 1
    return ids, mask, types


def state_dict_to_save(model: nn.Module, case: Case) -> dict:
    out = {}
    for key, tensor in model.state_dict().items():
        out[case.key_prefix + key] = tensor.detach().to(case.store_dtype).contiguous().clone()
    return out


def build_case(case: Case):
    torch.manual_seed(case.seed)  # only for anything HF itself might draw
    gen = torch.Generator().manual_seed(case.seed)
    config = make_config(case)
    model = case.build(config)
    model.eval()
    randomize(model, gen)
    round_to(model, case.store_dtype)
    ids, mask, types = make_inputs(case, gen)
    with torch.no_grad():
        hidden, heads = case.run(model, ids, mask, types)
    golden = {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": types,
        "last_hidden_state": hidden.to(torch.float32).contiguous(),
    }
    for name, logits in heads.items():
        golden[f"logits.{name}"] = logits.to(torch.float32).contiguous()
    assert set(heads) == set(case.heads), (case.name, sorted(heads))
    return config, model, golden


def check_finite(case_name: str, golden: dict) -> None:
    for k, v in golden.items():
        if v.is_floating_point() and not torch.isfinite(v).all():
            raise RuntimeError(f"{case_name}: non-finite values in {k}")


@torch.no_grad()
def reload_check(case: Case, folder: Path, golden: dict) -> str:
    """For HF classes, reload the written folder with from_pretrained and compare."""
    if case.key_prefix or case.architectures is None:
        return "n/a (not an HF class)"
    cls = case.build
    model = cls.from_pretrained(str(folder), dtype=torch.float32)
    model.eval()
    hidden, heads = case.run(
        model, golden["input_ids"], golden["attention_mask"], golden["token_type_ids"]
    )
    worst = float((hidden - golden["last_hidden_state"]).abs().max())
    for name, logits in heads.items():
        worst = max(worst, float((logits - golden[f"logits.{name}"]).abs().max()))
    if worst > 1e-5:
        raise RuntimeError(f"{case.name}: from_pretrained reload differs by {worst}")
    return f"ok (max diff {worst:.1e})"


def write_buckets(out: Path) -> dict:
    rel = torch.arange(-511, 512, dtype=torch.int64)
    buckets = hf.make_log_bucket_position(rel, bucket_size=256, max_position=512)
    buckets = buckets.to(torch.long)  # as build_relative_position does
    tensors = {"rel_bucket_256_512": buckets.contiguous()}
    return tensors


def file_kib(path: Path) -> float:
    return path.stat().st_size / 1024.0


def compare(name: str, expected: dict, actual: dict, atol: float = 0.0) -> list:
    problems = []
    if set(expected) != set(actual):
        problems.append(f"{name}: keys differ {sorted(expected)} vs {sorted(actual)}")
        return problems
    for k in expected:
        a, b = expected[k], actual[k]
        if a.dtype != b.dtype or a.shape != b.shape:
            problems.append(f"{name}:{k}: dtype/shape {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
        elif a.is_floating_point():
            d = float((a.float() - b.float()).abs().max()) if a.numel() else 0.0
            if d > atol:
                problems.append(f"{name}:{k}: max abs diff {d:.3e}")
        elif not torch.equal(a, b):
            problems.append(f"{name}:{k}: integer values differ")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    ap.add_argument(
        "--check",
        action="store_true",
        help="recompute everything and compare with the files on disk; write nothing",
    )
    args = ap.parse_args(argv)

    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    torch.use_deterministic_algorithms(True)
    out: Path = args.out
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, numpy {np.__version__}")
    print(f"output: {out}")

    problems = []
    rows = []
    for case in CASES:
        config, model, golden = build_case(case)
        check_finite(case.name, golden)
        weights = state_dict_to_save(model, case)
        folder = out / case.name
        if args.check:
            problems += compare(case.name + "/model", load_file(str(folder / "model.safetensors")), weights)
            problems += compare(case.name + "/golden", load_file(str(folder / "golden.safetensors")), golden, atol=1e-5)
            on_disk = json.loads((folder / "config.json").read_text())
            fresh = json.loads(config.to_json_string(use_diff=False))
            for k, v in fresh.items():
                if k != "transformers_version" and on_disk.get(k) != v:
                    problems.append(f"{case.name}/config.json: {k} {on_disk.get(k)!r} vs {v!r}")
            rows.append((case.name, "checked", "", ""))
            continue
        folder.mkdir(parents=True, exist_ok=True)
        config.to_json_file(str(folder / "config.json"), use_diff=False)
        save_file(weights, str(folder / "model.safetensors"), metadata={"format": "pt"})
        save_file(golden, str(folder / "golden.safetensors"), metadata={"format": "pt"})
        for f in ("model.safetensors", "golden.safetensors"):
            os.chmod(folder / f, 0o644)  # safetensors writes 0600
        reload = reload_check(case, folder, golden)
        size = sum(file_kib(folder / f) for f in ("config.json", "model.safetensors", "golden.safetensors"))
        heads = ", ".join(f"logits.{k}{list(golden['logits.' + k].shape)}" for k in case.heads) or "-"
        rows.append((case.name, f"{size:7.1f} KiB", heads, f"{len(weights)} keys {str(case.store_dtype)[6:]}; reload {reload}"))

    buckets = write_buckets(out)
    bucket_path = out / "buckets.safetensors"
    if args.check:
        problems += compare("buckets", load_file(str(bucket_path)), buckets)
    else:
        out.mkdir(parents=True, exist_ok=True)
        save_file(buckets, str(bucket_path), metadata={"format": "pt"})
        os.chmod(bucket_path, 0o644)
        rows.append(("buckets", f"{file_kib(bucket_path):7.1f} KiB", "rel_bucket_256_512[1023]", ""))

    for r in rows:
        print("  " + " | ".join(x for x in r if x))
    if args.check:
        if problems:
            print("MISMATCH:")
            for p in problems:
                print("  " + p)
            return 1
        print("all fixtures reproduce")
    else:
        total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) / 1024.0
        print(f"total under {out}: {total:.1f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
