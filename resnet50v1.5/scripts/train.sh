#!/usr/bin/env bash
# ResNet-50 v1.5 with NVIDIA's 90-epoch recipe (the defaults of main.py) on GPUS GPUs per
# machine, through scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several
# machines).
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
#   PRECISION: amp (float16 + dynamic loss scaling), tf32, or fp32 (TF32 off)
# Environment: DATA_DIR (TFRecords + idx/), RESULTS_DIR, BATCH_SIZE (per GPU; main.py: 256),
# EPOCHS (main.py: 90), LAUNCHER. The recipe is main.py's: this script only launches it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PRECISION=${1:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
GPUS=${2:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
XLA=${3:-noxla}
shift $(( $# < 3 ? $# : 3 ))
extra=()
DATA_DIR=${DATA_DIR-/data/imagenet}  # set but empty: synthetic data (benchmarks)
if [ -n "$DATA_DIR" ]; then extra+=(--data_dir "$DATA_DIR" --dali); fi
if [ -n "${EPOCHS:-}" ]; then extra+=(--iter_unit epoch --num_iter "$EPOCHS"); fi
if [ -n "${BATCH_SIZE:-}" ]; then extra+=(--batch_size "$BATCH_SIZE"); fi
exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" "$GPUS" "$XLA" \
  --results_dir "${RESULTS_DIR:-/results}" "${extra[@]}" "$@"
