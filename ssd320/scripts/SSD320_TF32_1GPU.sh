#!/usr/bin/env bash
# SSD320 v1.2, NVIDIA recipe, TF32 on 1 GPU(s). DATA_DIR, RESULTS_DIR, BACKBONE and extra flags as in train.sh.
exec bash "$(dirname "$0")/train.sh" tf32 1 noxla "$@"
