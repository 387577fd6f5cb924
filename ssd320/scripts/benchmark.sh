#!/usr/bin/env bash
# Throughput of SSD320 v1.2 on GPUS GPUs: training or inference, synthetic data unless DATA_DIR
# is set (then through DALI).
#   bash scripts/benchmark.sh training|inference PRECISION GPUS [xla|noxla] [extra flags]
# Environment: BATCH_SIZE (per GPU), NUM_ITER, WARMUP_STEPS, RESULTS_DIR, DATA_DIR, LAUNCHER.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
KIND=${1:?usage: benchmark.sh training|inference amp|tf32|fp32 GPUS [xla|noxla] [flags]}
shift
case "$KIND" in training|inference) ;; *) echo "benchmark.sh: error: training or inference, not $KIND" >&2; exit 2 ;; esac
DATA_DIR=${DATA_DIR:-} NUM_ITER=${NUM_ITER:-300} exec bash "$here/scripts/train.sh" "$1" "$2" \
  "${3:-noxla}" --mode "${KIND}_benchmark" --warmup_steps "${WARMUP_STEPS:-50}" \
  --results_dir "${RESULTS_DIR:-/results}/${KIND}_benchmark" "${@:4}"
