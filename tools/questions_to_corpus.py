#!/usr/bin/env python3
"""Pool the passages of a question file into a passage corpus for `hopscore embed` and
`hopscore retrieve` (the open-domain setting over a dev set's own passages).

    python3 tools/questions_to_corpus.py QUESTIONS.parquet CORPUS.parquet

Each distinct (title, text) becomes one row: `id` = the title (`title#n` for a second
text under a title already taken), `title`, `text`; in order of first appearance.
Needs pyarrow.
"""

import sys

import pyarrow as pa
import pyarrow.parquet as pq


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    seen, titles = {}, set()
    for q in pq.read_table(sys.argv[1], columns=["passages"]).column("passages").to_pylist():
        for p in q:
            key = (p["title"], p["text"])
            if key in seen:
                continue
            pid = p["title"] if p["title"] not in titles else f"{p['title']}#{len(seen)}"
            titles.add(p["title"])
            seen[key] = pid
    table = pa.table({
        "id": list(seen.values()),
        "title": [k[0] for k in seen],
        "text": [k[1] for k in seen],
    })
    pq.write_table(table, sys.argv[2])
    print(f"{len(seen)} passages → {sys.argv[2]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
