#!/usr/bin/env bash
# Transformer-XL base, NVIDIA recipe (global batch 256, 40,000 steps), FP32 on 1 GPU(s).
# BATCH_CHUNK (gradient accumulation; default 8), DATA_DIR, RESULTS_DIR and extra flags as in train.sh.
exec bash "$(dirname "$0")/train.sh" fp32 1 noxla "$@"
