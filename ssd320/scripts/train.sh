#!/usr/bin/env bash
# SSD320 v1.2 with NVIDIA's recipe (the defaults of main.py) on GPUS GPUs per machine, through
# scripts/launch.sh (mpirun; LAUNCHER=horovodrun or srun, HOSTS for several machines). The step
# count keeps NVIDIA's number of images: 12,500 steps of 8 x 32 = 3.2 M images, i.e. 100,000
# steps on 1 GPU and 25,000 on 4, as in its 1- and 4-GPU configs (the learning rate and
# warm-up scale with the global batch).
#   bash scripts/train.sh PRECISION GPUS [xla|noxla] [extra main.py flags]
# Environment: DATA_DIR (prepare_dataset.py output), RESULTS_DIR, BATCH_SIZE (per GPU, 32),
# NUM_ITER (steps), BACKBONE (a resnet50v1.5 checkpoint or model_dir), LAUNCHER.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PRECISION=${1:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
GPUS=${2:?usage: train.sh amp|tf32|fp32 GPUS [xla|noxla] [flags]}
XLA=${3:-noxla}
shift $(( $# < 3 ? $# : 3 ))
BATCH_SIZE=${BATCH_SIZE:-32}
source "$here/../scripts/world.sh"
WORLD=$(world_size "$GPUS") || exit 2  # every machine's GPUs (HOSTS, or srun's nodes)
extra=()
DATA_DIR=${DATA_DIR-/data/coco}  # set but empty: synthetic data (benchmarks)
if [ -n "$DATA_DIR" ]; then extra+=(--data_dir "$DATA_DIR" --dali); fi
if [ -n "${BACKBONE:-}" ]; then extra+=(--backbone_checkpoint "$BACKBONE"); fi
exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" "$GPUS" "$XLA" \
  --mode train_and_evaluate --iter_unit batch \
  --num_iter "${NUM_ITER:-$(( 12500 * 256 / (WORLD * BATCH_SIZE) ))}" \
  --batch_size "$BATCH_SIZE" --results_dir "${RESULTS_DIR:-/results}" "${extra[@]}" "$@"
