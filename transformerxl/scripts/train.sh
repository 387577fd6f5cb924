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
. "$(dirname "$0")/../../scripts/train_prelude.sh" /data/wikitext-103-prepared "$@"
if [ "${DALI:-0}" = 1 ]; then extra+=(--dali); fi
env_flag BATCH_CHUNK --batch_chunk
env_flag NUM_ITER --num_iter
env_flag EVAL_EVERY --eval_every
launch
