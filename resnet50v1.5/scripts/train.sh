#!/usr/bin/env bash
# ResNet-50 v1.5 with NVIDIA's 90-epoch recipe (the defaults of main.py) on GPUS GPUs per
# machine, through scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several
# machines).
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
#   PRECISION: amp (float16 + dynamic loss scaling), tf32, or fp32 (TF32 off)
# Environment: DATA_DIR (TFRecords + idx/), RESULTS_DIR, BATCH_SIZE (per GPU; main.py: 256),
# EPOCHS (main.py: 90), LAUNCHER. The recipe is main.py's: this script only launches it.
set -euo pipefail
. "$(dirname "$0")/../../scripts/train_prelude.sh" /data/imagenet "$@"
if [ -n "$DATA_DIR" ]; then extra+=(--dali); fi
env_flag EPOCHS --iter_unit epoch --num_iter
env_flag BATCH_SIZE --batch_size
launch
