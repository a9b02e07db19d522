#!/usr/bin/env python3
"""Cut the real-data test fixtures (tests/fixtures/data/) out of the dev samples.

Run by hand (never in CI), from the repository root, with the standard library only:

    python3 tools/goldens/make_data_slices.py [--data DIR] [--check]

``--data`` is the folder holding the dev samples (default ``data/`` in the checkout, or ``$HOPSCORE_DATA``);
``--check`` compares with the committed files instead of writing them.

Each slice keeps the records of the sample in their sample order and native format,
serialised exactly as in the sample (``json.dumps`` defaults: the sample files are
that serialisation), gzip with a zero timestamp so the bytes are reproducible. The
questions are those of the goldens (positions in the sample file):

* HotpotQA: every question of tests/fixtures/beam/goldens.json and
  tests/fixtures/efficientrag/goldens.json (20: #0-#15, #33, #137, #147, #587).
* MuSiQue: the same two goldens (13) and 7 of the tokenizer golden's questions with
  the most unusual characters (#18 #19 #27 #57 #63 #68 #72).
* 2WikiMultihopQA: every question of tests/fixtures/tokenizer/deberta_v3_ids.json (15)
  and #71, whose supporting fact points past its passage (an import issue).
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
from pathlib import Path

from common import DATA_DIR, FIXTURES, HOTPOT_FILE, MUSIQUE_FILE, REPO_ROOT, TWOWIKI_FILE, read_records

OUT = FIXTURES / "data"

# (sample file, slice file, JSON lines?, id key, sample positions)
SLICES = [
    (
        HOTPOT_FILE,
        "hotpot_dev_distractor_slice.json.gz",
        False,
        "_id",
        list(range(16)) + [33, 137, 147, 587],
    ),
    (
        MUSIQUE_FILE,
        "musique_ans_v1.0_dev_slice.jsonl.gz",
        True,
        "id",
        list(range(8)) + [10, 12, 15, 18, 19, 27, 57, 63, 68, 72, 86, 99],
    ),
    (
        TWOWIKI_FILE,
        "2wikimultihopqa_dev_slice.json.gz",
        False,
        "_id",
        [0, 1, 2, 4, 13, 29, 36, 37, 66, 69, 70, 71, 101, 159, 233, 297],
    ),
]

# Goldens whose every question must be in the slices: (file, dataset → slice file).
GOLDENS = ["beam/goldens.json", "efficientrag/goldens.json"]


def serialise(records: list, jsonl: bool) -> bytes:
    text = "".join(json.dumps(r) + "\n" for r in records) if jsonl else json.dumps(records)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    return buf.getvalue()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA_DIR)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    kept_ids = set()
    differ = []
    for sample, name, jsonl, key, positions in SLICES:
        records = read_records(args.data / sample)
        chosen = [records[i] for i in sorted(positions)]
        assert len(chosen) <= 20, f"{name}: at most 20 questions per dataset"
        kept_ids.update(r[key] for r in chosen)
        data = serialise(chosen, jsonl)
        path = OUT / name
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                differ.append(name)
        else:
            OUT.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            print(f"{path.relative_to(REPO_ROOT)}: {len(chosen)} questions, {len(data)} B")
    for golden in GOLDENS:
        doc = json.loads((FIXTURES / golden).read_text())
        missing = {q["id"] for q in doc["questions"]} - kept_ids
        assert not missing, f"{golden}: questions missing from the slices: {sorted(missing)}"
    if differ:
        print("differs from the committed file: " + ", ".join(differ), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
