#!/usr/bin/env bash
# Throughput and latency of ResNet-50 v1.5 on GPUS GPUs per machine over batch sizes and
# precisions, as NVIDIA's training_benchmark.sh and inference_benchmark.sh sweep them: one
# main.py process per configuration (python -m benchtools.sweep), one table with speed-ups
# against FP32 measured in the same sweep. Synthetic data unless DATA_DIR is set (then DALI).
#   bash scripts/benchmark.sh training|inference [PRECISIONS] [GPUS] [xla|noxla|both] [flags]
#   PRECISIONS: comma-separated amp, tf32, fp32 (default: all three); GPUS: default 1
# Environment: BATCH_SIZES (comma-separated, per GPU; training: 256, inference:
# 1,2,4,8,16,32,64,128,256), NUM_ITER (500), WARMUP_STEPS (100), ROUNDS (1), RESULTS_DIR,
# DATA_DIR. Flags after the first four go to every main.py run.
set -euo pipefail
training_batches=256 inference_batches=1,2,4,8,16,32,64,128,256 num_iter=500 warmup_steps=100
. "$(dirname "$0")/../../scripts/benchmark_sweep.sh"
