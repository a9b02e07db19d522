#!/usr/bin/env bash
# Runs `hopscore review` (Tree of Reviews and ALLIES) on real HotpotQA questions against
# SmolLM2-135M-Instruct served by llama-cpp-python's OpenAI-compatible server on
# 127.0.0.1. Not part of CI: installing llama-cpp-python[server] from PyPI compiles
# llama.cpp (several minutes; pip fetches cmake itself).
#
#   bash tools/review_smollm2.sh            # 10 questions
#   N=50 PORT=8800 bash tools/review_smollm2.sh
#   TOR_FLAGS="--depth 2 --widths 3,2" bash tools/review_smollm2.sh   # a smaller tree
#
# Defaults are the papers' settings (ToR depth 3, widths 5,3,3, MPC expansion; ALLIES
# B=2, D=2, K=2, N=2, threshold 0.8); extra flags go in TOR_FLAGS and ALLIES_FLAGS.
#
# Outputs go to $OUT (default target/review-smollm2): the question file, tor.parquet,
# allies.parquet, their caches and eval reports, and the server log. A second run is
# answered from the caches.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-10}
PORT=${PORT:-8765}
OUT=${OUT:-target/review-smollm2}
VENV=${VENV:-target/llama-venv}
DATA=${DATA:-${HOPSCORE_DATA:-data}/hotpot_dev_distractor_sample600.json.gz}
GGUF=weights/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
mkdir -p "$OUT"

[ -f "$GGUF" ] || bash tools/fetch_smollm2.sh
[ -f "$DATA" ] || { echo "missing $DATA (real HotpotQA dev questions)" >&2; exit 1; }
if ! "$VENV/bin/python" -c "import llama_cpp.server" 2>/dev/null; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q cmake ninja
    # The multimodal library (llava/mtmd) is not needed: a third fewer files to compile.
    CMAKE_ARGS="-DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) \
        "$VENV/bin/pip" install "llama-cpp-python[server]"
fi
cargo build --release
HOPSCORE=target/release/hopscore

# The first N questions of the file, imported into a question file.
python3 - "$DATA" "$N" "$OUT/hotpot_first.json" <<'EOF'
import gzip, json, sys
src, n, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with gzip.open(src, "rt") as f:
    records = json.load(f)[:n]
with open(dst, "w") as f:
    json.dump(records, f)
EOF
"$HOPSCORE" import hotpotqa "$OUT/hotpot_first.json" -o "$OUT/questions.parquet"

"$VENV/bin/python" -m llama_cpp.server --model "$GGUF" --model_alias smollm2 \
    --host 127.0.0.1 --port "$PORT" --n_ctx 8192 > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 120); do
    if python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$PORT/v1/models', timeout=2)" 2>/dev/null; then
        break
    fi
    kill -0 $SERVER 2>/dev/null || { echo "the server exited; see $OUT/server.log" >&2; exit 1; }
    sleep 1
done

for strategy in tor allies; do
    echo "== $strategy"
    if [ "$strategy" = tor ]; then extra=${TOR_FLAGS:-}; else extra=${ALLIES_FLAGS:-}; fi
    "$HOPSCORE" review --strategy "$strategy" --input "$OUT/questions.parquet" \
        --output "$OUT/$strategy.parquet" --endpoint "http://127.0.0.1:$PORT" \
        --llm-model smollm2 --concurrency 2 --max-tokens 256 --timeout 300 $extra
    "$HOPSCORE" eval --pred "$OUT/$strategy.parquet" --gold "$OUT/questions.parquet" \
        | tee "$OUT/$strategy.eval.txt"
    "$HOPSCORE" show "$OUT/$strategy.parquet" --rows "$N" \
        --columns id,answer,status,llm_calls,prompt_tokens,completion_tokens,parse_failures,retries
done
