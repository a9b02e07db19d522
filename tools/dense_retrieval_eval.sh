#!/usr/bin/env bash
# Dense retrieval on the 600 HotpotQA dev questions (docs/parity.md, "Dense retrieval
# on HotpotQA dev"): pool their passages into one corpus, embed it with
# all-MiniLM-L6-v2, retrieve the top 20 per question with BM25, MiniLM and their
# reciprocal rank fusion, print R@2/5/10/20 (each run, then the three in one `eval`
# table with the recall plot recall.svg); then `embed` throughput next to
# sentence-transformers on the first 1,500 passages (2 threads).
#
#   bash tools/dense_retrieval_eval.sh [WORKDIR]     (default: target/dense-eval)
#
# Needs: a release build (cargo build --release), $PYTHON (default .venv/bin/python or
# python3) with pyarrow (and torch + sentence-transformers for the throughput step;
# SKIP_BENCH=1 skips it), the HotpotQA dev sample in data/ (or
# $HOPSCORE_DATA; see tools/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:-target/dense-eval}
PY=${PYTHON:-$([ -x .venv/bin/python ] && echo .venv/bin/python || echo python3)}
H=target/release/hopscore
DATA=${HOPSCORE_DATA:-data}
M=weights/all-minilm-l6-v2
mkdir -p "$W"
[ -f $M/model.safetensors ] || bash tools/fetch_minilm.sh
$H import hotpotqa "$DATA/hotpot_dev_distractor_sample600.json.gz" --output "$W/q600.parquet"
"$PY" tools/questions_to_corpus.py "$W/q600.parquet" "$W/corpus.parquet"
$H --threads 2 embed --model $M --input "$W/corpus.parquet" --output "$W/index.parquet"
for r in bm25 dense hybrid; do
  echo "== $r"
  $H --threads 2 retrieve --retriever $r --questions "$W/q600.parquet" --corpus "$W/corpus.parquet" \
    --index "$W/index.parquet" --encoder $M --k 20 --output "$W/retrieved-$r.parquet" 2>&1 | tail -1
done
echo "== the three against the original questions, one table (and $W/recall.svg)"
$H eval --gold "$W/q600.parquet" --pred "$W/retrieved-bm25.parquet" --pred "$W/retrieved-dense.parquet" \
  --pred "$W/retrieved-hybrid.parquet" --name bm25 --name dense --name hybrid --k 2,5,10,20 \
  --plot "$W/recall.svg"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo "== embed throughput, 2 threads"
  "$PY" tools/bench_embed_reference.py --corpus "$W/corpus.parquet" --model $M --hopscore $H \
    --threads 2 --limit 1500
fi
