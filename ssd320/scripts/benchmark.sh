#!/usr/bin/env bash
# Throughput and latency of SSD320 v1.2 on GPUS GPUs per machine over batch sizes and
# precisions, as NVIDIA's benchmark scripts sweep them: one main.py process per configuration
# (python -m benchtools.sweep), one table with speed-ups against FP32 measured in the same
# sweep. Synthetic data unless DATA_DIR is set (then DALI).
#   bash scripts/benchmark.sh training|inference [PRECISIONS] [GPUS] [xla|noxla|both] [flags]
#   PRECISIONS: comma-separated amp, tf32, fp32 (default: all three); GPUS: default 1
# Environment: BATCH_SIZES (comma-separated, per GPU; training: 32, inference: 1,2,4,8,16,32),
# NUM_ITER (300), WARMUP_STEPS (50), ROUNDS (1), RESULTS_DIR, DATA_DIR. Flags after the first
# four go to every main.py run.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
usage="usage: benchmark.sh training|inference [amp,tf32,fp32] [GPUS] [xla|noxla|both] [flags]"
KIND=${1:?$usage}
case "$KIND" in
  training) batches=${BATCH_SIZES:-32} ;;
  inference) batches=${BATCH_SIZES:-1,2,4,8,16,32} ;;
  *) echo "benchmark.sh: error: training or inference, not $KIND" >&2; exit 2 ;;
esac
case "${4:-noxla}" in xla) xla=on ;; noxla) xla=off ;; both) xla=both ;;
  *) echo "benchmark.sh: error: xla, noxla or both, not $4" >&2; exit 2 ;; esac
data=()
if [ -n "${DATA_DIR:-}" ]; then data=(--data_dir "$DATA_DIR" --dali); fi
exec "${PYTHON:-python}" -m benchtools.sweep "$here/main.py" --mode "${KIND}_benchmark" \
  --batch_sizes "$batches" --precisions "${2:-amp,tf32,fp32}" --gpus "${3:-1}" --xla "$xla" \
  --rounds "${ROUNDS:-1}" --results_dir "${RESULTS_DIR:-/results}/${KIND}_benchmark" -- \
  --iter_unit batch --num_iter "${NUM_ITER:-300}" --warmup_steps "${WARMUP_STEPS:-50}" \
  "${data[@]}" "${@:5}"
