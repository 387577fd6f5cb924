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
training_batches=32 inference_batches=1,2,4,8,16,32 num_iter=300 warmup_steps=50
. "$(dirname "$0")/../../scripts/benchmark_sweep.sh"
