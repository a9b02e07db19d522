#!/usr/bin/env python3
"""Build examples/demo/lepus_pairs.parquet from examples/demo/questions.json.

Each (question, document) pair becomes one LEPUS single-document prompt (SPEC §3,
instruction after the document, the project's own instruction wording):

    prompt = "Document: {title}. {text} Review the previous document and ask a question
              to which the document provides the answer. Question: "
    target = the question ("?" kept)

`hopscore loglik` then scores log P(question | prompt); for each question, the
document that answers it should rank first. The questions and documents are written
by the project (no dataset text). Run by hand after editing questions.json:

    python tools/make_demo_pairs.py      # needs pyarrow
"""

import json
import pathlib

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parent.parent
INSTRUCTION = "Review the previous document and ask a question to which the document provides the answer."


def main() -> None:
    questions = json.loads((ROOT / "examples/demo/questions.json").read_text())
    ids, prompts, targets = [], [], []
    for q in questions:
        for k, d in enumerate(q["documents"]):
            ids.append(f"{q['id']}/{k}:{d['title']}")
            prompts.append(f"Document: {d['title']}. {d['text']} {INSTRUCTION} Question: ")
            targets.append(q["question"])
    table = pa.table({"id": ids, "prompt": prompts, "target": targets})
    out = ROOT / "examples/demo/lepus_pairs.parquet"
    pq.write_table(table, out)
    print(f"wrote {out} ({table.num_rows} pairs)")


if __name__ == "__main__":
    main()
