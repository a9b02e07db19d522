#!/usr/bin/env bash
# Runs every scoring command on the committed fixtures with two hopscore binaries and
# compares their outputs: the rows of every output and quarantine file, and their run
# metadata (with the two work folders' names made equal; `hopscore.version` may differ; the
# after binary may add keys, and change the values of the keys named in $CHANGED, a comma
# list: each change is printed). For refactors that promise unchanged output:
#
#   cp target/release/hopscore /tmp/before     # at the old commit
#   cargo build --release && bash tools/same_rows.sh /tmp/before target/release/hopscore
#
# Needs tools/fetch_tokenizer.sh and tools/fetch_minilm.sh (weights/) and a Python with
# pyarrow (PYTHON, default .venv/bin/python).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 BEFORE_BINARY AFTER_BINARY" >&2; exit 2; }
PY="${PYTHON:-.venv/bin/python}"
F=tests/fixtures
TOK=weights/deberta-v3-tokenizer/tokenizer.json
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

run_all() { # BINARY DIR
  local B="$1" D="$2"
  mkdir -p "$D"
  "$B" import hotpotqa $F/data/hotpot_dev_distractor_slice.json.gz -o "$D/hotpot.parquet"
  "$B" import musique $F/data/musique_ans_v1.0_dev_slice.jsonl.gz -o "$D/musique.parquet"
  "$B" import 2wiki $F/data/2wikimultihopqa_dev_slice.json.gz -o "$D/wiki.parquet"
  for q in hotpot musique wiki; do
    "$B" beam --model $F/beam/model --tokenizer $TOK --input "$D/$q.parquet" \
      --output "$D/$q.beam.parquet" --max-batch-tokens 4096 --part-rows 7
    "$B" label --labeler $F/efficientrag/labeler --filter $F/efficientrag/filter --tokenizer $TOK \
      --input "$D/$q.parquet" --output "$D/$q.label.parquet"
    "$B" lepus --scorer bm25 --input "$D/$q.parquet" --output "$D/$q.bm25.parquet"
  done
  "$B" lepus --model $F/lepus/gpt2_bytes --input "$D/hotpot.parquet" --output "$D/hotpot.lepus.parquet" \
    --first-hops 3 --second-hops 2
  "$PY" - "$D" <<'PY'
import sys, pyarrow as pa, pyarrow.parquet as pq
d = sys.argv[1]
t = pq.read_table(f"{d}/hotpot.parquet").slice(0, 12)
pairs, prompts, passages = [], [], []
for row in t.to_pylist():
    ps = row["passages"]
    for k, p in enumerate(ps[:3]):
        pairs.append({"id": f"{row['id']}-{k}", "text_a": row["question"], "text_b": p["text"]})
        prompts.append({"id": f"{row['id']}-{k}", "prompt": p["text"][:300], "target": row["question"]})
        passages.append({"id": f"{row['id']}-{k}", "title": p["title"], "text": p["text"]})
pairs.append({"id": None, "text_a": "x", "text_b": "y"})
prompts.append({"id": "empty", "prompt": "p", "target": ""})
pq.write_table(pa.Table.from_pylist(pairs), f"{d}/pairs.parquet")
pq.write_table(pa.Table.from_pylist(prompts), f"{d}/prompts.parquet")
pq.write_table(pa.Table.from_pylist(passages), f"{d}/passages.parquet")
PY
  "$B" classify --model $F/efficientrag/labeler --tokenizer $TOK --input "$D/pairs.parquet" \
    --output "$D/pairs.classify.parquet"
  "$B" loglik --model $F/lepus/gpt2_bytes --input "$D/prompts.parquet" --output "$D/prompts.loglik.parquet"
  "$B" embed --model weights/all-minilm-l6-v2 --input "$D/passages.parquet" --output "$D/passages.embed.parquet"
  for r in dense bm25 hybrid; do
    "$B" retrieve --retriever $r --encoder weights/all-minilm-l6-v2 --index "$D/passages.embed.parquet" \
      --corpus "$D/passages.parquet" --questions "$D/hotpot.parquet" --output "$D/hotpot.$r.parquet" --k 5
  done
}

for side in before:"$1" after:"$2"; do
  set +e
  (set -e; run_all "${side#*:}" "$work/${side%%:*}") >"$work/log" 2>&1
  rc=$?
  set -e
  [ $rc -eq 0 ] || { cat "$work/log"; echo "${side#*:} failed" >&2; exit 1; }
done
"$PY" - "$work/before" "$work/after" <<'PY'
import os, sys, pathlib, pyarrow.parquet as pq
before, after = map(pathlib.Path, sys.argv[1:])
names = sorted(p.name for p in before.glob("*.parquet"))
assert names == sorted(p.name for p in after.glob("*.parquet")), "different output files"
differ = 0


def metadata(table, folder):
    kv = {k.decode(): v.decode().replace(str(folder), "WORK")
          for k, v in (table.schema.metadata or {}).items() if k != b"hopscore.version"}
    return kv


# The run fingerprint is a digest of the other keys: it changes whenever keys are added.
changed = {k for k in os.environ.get("CHANGED", "").split(",") if k} | {"hopscore.run_fingerprint"}
for name in names:
    a, b = (pq.read_table(d / name) for d in (before, after))
    rows = a.replace_schema_metadata(None).equals(b.replace_schema_metadata(None))
    ma, mb = metadata(a, before), metadata(b, after)
    lost = [k for k in ma if k not in mb or (ma[k] != mb[k] and k not in changed)]
    for k in sorted(k for k in changed - {"hopscore.run_fingerprint"} if k in ma and k in mb and ma[k] != mb[k]):
        print(f"  {name}: {k}: {ma[k]!r} -> {mb[k]!r}")
    meta = not lost
    differ += not (rows and meta)
    what = "same" if rows and meta else (f"DIFFERENT METADATA {lost}" if rows else "DIFFERENT ROWS")
    added = len([k for k in mb if k not in ma])
    print(f"{what} {name}: {a.num_rows} rows, {a.num_columns} columns, {added} keys added")
print(f"{len(names)} files, {differ} different")
sys.exit(1 if differ else 0)
PY
