#!/usr/bin/env bash
# Beam Retrieval over one question file on N GPUs as a Slurm job array: task i scores
# shard i/N with `hopscore beam --shard i/N`; a dependent job merges the shards
# (`hopscore merge` checks that they are complete and come from the same model, input
# and options). Submit with:  bash examples/cluster/slurm_array.sh questions.parquet out/ 8
# Re-submitting after a failure resumes every shard (--resume keeps finished parts).
set -euo pipefail
QUESTIONS=${1:?question file}
OUT=${2:?output folder}
N=${3:-4}
MODEL=${MODEL:-weights/beam-hotpot}
mkdir -p "$OUT"

array=$(sbatch --parsable --array=0-$((N - 1)) --gres=gpu:1 --cpus-per-task=4 \
  --job-name=hopscore-beam --output="$OUT/shard-%a.log" --wrap \
  "hopscore beam --model '$MODEL' --input '$QUESTIONS' --device cuda --resume \
     --shard \$SLURM_ARRAY_TASK_ID/$N --output '$OUT'/shard-\$SLURM_ARRAY_TASK_ID.parquet")

sbatch --dependency=afterok:"$array" --job-name=hopscore-merge --output="$OUT/merge.log" \
  --wrap "hopscore merge -o '$OUT/chains.parquet' $(for i in $(seq 0 $((N - 1))); do printf "'%s' " "$OUT/shard-$i.parquet"; done)"
echo "submitted array $array ($N shards) and its merge: $OUT/chains.parquet"
