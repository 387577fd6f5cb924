#!/usr/bin/env bash
# Transformer-XL base with NVIDIA's recipe (the defaults of main.py) on GPUS GPUs per machine,
# through scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several machines).
# main.py keeps the global batch at 256 rows of 192 tokens: each process takes
# 256 / (processes x --batch_chunk) rows per micro-batch and accumulates --batch_chunk of them
# per step (1 on 8 GPUs or more, 8 / GPUs below; raise BATCH_CHUNK when a GPU runs out of
# memory); this script only launches it.
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
# Environment: DATA_DIR (prepare_dataset.py output), RESULTS_DIR, BATCH_CHUNK, NUM_ITER (steps;
# main.py: 40000), EVAL_EVERY (main.py: 5000), DALI=1 to read with DALI, LAUNCHER.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PRECISION=${1:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
GPUS=${2:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
XLA=${3:-noxla}
shift $(( $# < 3 ? $# : 3 ))
extra=()
DATA_DIR=${DATA_DIR-/data/wikitext-103-prepared}  # set but empty: synthetic data (benchmarks)
if [ -n "$DATA_DIR" ]; then extra+=(--data_dir "$DATA_DIR"); fi
if [ "${DALI:-0}" = 1 ]; then extra+=(--dali); fi
if [ -n "${BATCH_CHUNK:-}" ]; then extra+=(--batch_chunk "$BATCH_CHUNK"); fi
if [ -n "${NUM_ITER:-}" ]; then extra+=(--num_iter "$NUM_ITER"); fi
if [ -n "${EVAL_EVERY:-}" ]; then extra+=(--eval_every "$EVAL_EVERY"); fi
exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" "$GPUS" "$XLA" \
  --results_dir "${RESULTS_DIR:-/results}" "${extra[@]}" "$@"
