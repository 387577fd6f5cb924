#!/usr/bin/env bash
# SSD320 v1.2, NVIDIA recipe, AMP + XLA on 8 GPU(s). DATA_DIR, RESULTS_DIR, BACKBONE and extra flags as in train.sh.
exec bash "$(dirname "$0")/train.sh" amp 8 xla "$@"
