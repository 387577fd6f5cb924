#!/usr/bin/env bash
# Transformer-XL base, NVIDIA recipe (global batch 256, 40,000 steps), TF32 on 8 GPU(s).
# BATCH_CHUNK (gradient accumulation; default 1), DATA_DIR, RESULTS_DIR and extra flags as in train.sh.
exec bash "$(dirname "$0")/train.sh" tf32 8 noxla "$@"
