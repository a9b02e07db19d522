#!/usr/bin/env python3
"""Compare two hopscore output files row by row (e.g. `--device cuda` against `--device cpu`).

    python3 tools/gpu/compare_outputs.py cpu.parquet cuda.parquet [--key id] [--json]

Rows are matched by `--key` (default `id`). Within a row, every value that is not a float
(chains, titles, tags, kept text, stop reasons...) must be equal for the row to agree;
floats are compared by absolute difference. Prints the number of rows, how many agree
in every non-float value, the first few that do not (with the column), and the largest
float difference per column. Exit status 0 whatever the result (it reports, it does not
judge); 2 when the files cannot be compared (different ids, columns). Needs pyarrow.
"""

import argparse
import json
import sys


def walk(a, b, path, floats, diffs):
    """Records float differences in `floats[column]`, other differences in `diffs`."""
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            diffs.append(path)
        else:
            col = path.split("[")[0].split(".")[0]
            floats[col] = max(floats.get(col, 0.0), abs(a - b))
    elif isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        for k in a:
            walk(a[k], b[k], f"{path}.{k}", floats, diffs)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            walk(x, y, f"{path}[{i}]", floats, diffs)
    elif a != b:
        diffs.append(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--key", default="id")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(args.a), pq.read_table(args.b)
    if ta.column_names != tb.column_names:
        print(f"columns differ: {ta.column_names} vs {tb.column_names}", file=sys.stderr)
        return 2
    ra = {r[args.key]: r for r in ta.to_pylist()}
    rb = {r[args.key]: r for r in tb.to_pylist()}
    if ra.keys() != rb.keys():
        print(f"ids differ: {len(ra.keys() - rb.keys())} only in a, {len(rb.keys() - ra.keys())} only in b",
              file=sys.stderr)
        return 2
    floats, disagree = {}, []
    for key in ra:
        diffs = []
        for col in ta.column_names:
            walk(ra[key][col], rb[key][col], col, floats, diffs)
        if diffs:
            disagree.append((key, diffs[0]))
    report = {
        "rows": len(ra),
        "agree": len(ra) - len(disagree),
        "agreement": (len(ra) - len(disagree)) / max(len(ra), 1),
        "first_disagreements": disagree[:5],
        "max_float_diff": floats,
    }
    if args.json:
        print(json.dumps(report))
    else:
        print(f"{report['rows']} rows, {report['agree']} agree in every non-float value "
              f"({100 * report['agreement']:.1f}%)")
        for key, where in disagree[:5]:
            print(f"  differs: {args.key}={key} at {where}")
        for col, d in sorted(floats.items()):
            print(f"  max |Δ| {col}: {d:.3e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
