#!/usr/bin/env bash
# ResNet-50 v1.5 with NVIDIA's 90-epoch recipe (the defaults of main.py) on GPUS GPUs per
# machine, through scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several
# machines).
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
#   PRECISION: amp (float16 + dynamic loss scaling), tf32, or fp32 (TF32 off)
# Environment: DATA_DIR (TFRecords + idx/), RESULTS_DIR, BATCH_SIZE (per GPU), EPOCHS, LAUNCHER.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PRECISION=${1:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
GPUS=${2:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
XLA=${3:-noxla}
shift $(( $# < 3 ? $# : 3 ))
data=()
DATA_DIR=${DATA_DIR-/data/imagenet}  # set but empty: synthetic data (benchmarks)
if [ -n "$DATA_DIR" ]; then data=(--data_dir "$DATA_DIR" --dali); fi
exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" "$GPUS" "$XLA" \
  --mode train_and_evaluate --iter_unit epoch --num_iter "${EPOCHS:-90}" \
  --batch_size "${BATCH_SIZE:-256}" --results_dir "${RESULTS_DIR:-/results}" "${data[@]}" "$@"
