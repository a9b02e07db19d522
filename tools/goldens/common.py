"""What the golden generators of tools/goldens/ share: repository paths, the dev
samples they read, the downloaded weights, the LEPUS prompt, checksums.

Standard library only, so that it imports without torch; the generators import it
as ``common`` (they run from this folder's scripts: ``python3 tools/goldens/X.py``).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FIXTURES = REPO_ROOT / "tests" / "fixtures"

# The full dev samples the slices and goldens were cut from (not in the repository:
# data/ in the checkout, or the folder $HOPSCORE_DATA names; see tools/README.md).
DATA_DIR = Path(os.environ.get("HOPSCORE_DATA", REPO_ROOT / "data"))
HOTPOT_FILE = "hotpot_dev_distractor_sample600.json.gz"
MUSIQUE_FILE = "musique_ans_v1.0_dev_sample100.jsonl.gz"
TWOWIKI_FILE = "2wikimultihopqa_dev_sample330.json.gz"

# The attention settings that make a DebertaV2Config a DeBERTa-v3 (microsoft/deberta-v3-*):
# log-bucketed relative positions shared between content and position keys.
DEBERTA_V3_ATTENTION = dict(
    relative_attention=True,
    position_buckets=256,
    max_relative_positions=-1,
    pos_att_type=["p2c", "c2p"],
    share_att_key=True,
    norm_rel_ebd="layer_norm",
    position_biased_input=False,
)

# Downloads of tools/fetch_tokenizer.sh and tools/fetch_smollm2.sh.
DEBERTA_TOKENIZER_DIR = REPO_ROOT / "weights" / "deberta-v3-tokenizer"
DEBERTA_TOKENIZER = DEBERTA_TOKENIZER_DIR / "tokenizer.json"
SMOLLM2_DIR = REPO_ROOT / "weights" / "smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# The LEPUS prompt (SPEC §3, instruction after the document) of the SmolLM2 goldens;
# tests/common/mod.rs rebuilds it.
LEPUS_INSTRUCTION = "Review the previous document and ask a question to which the document provides the answer."


def offline() -> None:
    """Keeps HF libraries off the network (call before importing transformers)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def read_records(path: Path) -> list:
    """A gzip JSON array (HotpotQA, 2Wiki) or JSON-lines file (MuSiQue)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        if path.name.endswith(".jsonl.gz"):
            return [json.loads(line) for line in f if line.strip()]
        return json.load(f)


def hotpot_rows(data_dir: Path = DATA_DIR) -> list:
    """The HotpotQA dev sample, in file order."""
    return read_records(data_dir / HOTPOT_FILE)


def lepus_prompt(title: str, sentences: list[str]) -> str:
    """`Document: {title}. {sentences joined, stripped} {instruction} Question:`."""
    body = "".join(sentences).strip()
    return f"Document: {title}. {body} {LEPUS_INSTRUCTION} Question:"


def require_smollm2() -> tuple[Path, str]:
    """(folder, GGUF file name) of SmolLM2; exits with a hint when it is not fetched."""
    if not (SMOLLM2_DIR / SMOLLM2_GGUF).is_file():
        sys.exit("weights/smollm2 missing: run bash tools/fetch_smollm2.sh")
    return SMOLLM2_DIR, SMOLLM2_GGUF


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
