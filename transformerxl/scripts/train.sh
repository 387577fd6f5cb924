#!/usr/bin/env bash
# Transformer-XL base with NVIDIA's recipe (the defaults of main.py) on GPUS GPUs per machine,
# through scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several machines).
# The global batch stays 256 rows of 192 tokens: each of the WORLD GPUs (every machine's) takes
# 256 / (WORLD x BATCH_CHUNK) rows per micro-batch and accumulates BATCH_CHUNK of them per
# step (raise BATCH_CHUNK when a GPU runs out of memory).
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
# Environment: DATA_DIR (prepare_dataset.py output), RESULTS_DIR, BATCH_CHUNK (default 1 on 8
# GPUs, 8 on 1), NUM_ITER (steps, 40000), DALI=1 to read with DALI, LAUNCHER.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PRECISION=${1:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
GPUS=${2:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
XLA=${3:-noxla}
shift $(( $# < 3 ? $# : 3 ))
source "$here/../scripts/world.sh"
WORLD=$(world_size "$GPUS") || exit 2  # every machine's GPUs (HOSTS, or srun's nodes)
BATCH_CHUNK=${BATCH_CHUNK:-$(( WORLD >= 8 ? 1 : 8 / WORLD ))}
if (( 256 % (WORLD * BATCH_CHUNK) )); then
  echo "train.sh: error: 256 rows do not split over $WORLD GPUs x BATCH_CHUNK $BATCH_CHUNK" >&2
  exit 2
fi
extra=()
DATA_DIR=${DATA_DIR-/data/wikitext-103-prepared}  # set but empty: synthetic data (benchmarks)
if [ -n "$DATA_DIR" ]; then extra+=(--data_dir "$DATA_DIR"); fi
if [ "${DALI:-0}" = 1 ]; then extra+=(--dali); fi
exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" "$GPUS" "$XLA" \
  --mode train_and_evaluate --iter_unit batch --num_iter "${NUM_ITER:-40000}" \
  --eval_every "${EVAL_EVERY:-5000}" --batch_size $(( 256 / (WORLD * BATCH_CHUNK) )) \
  --batch_chunk "$BATCH_CHUNK" --results_dir "${RESULTS_DIR:-/results}" "${extra[@]}" "$@"
