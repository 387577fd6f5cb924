#!/usr/bin/env bash
# ResNet-50 v1.5, 90 epochs, FP32 on 8 GPU(s). DATA_DIR, RESULTS_DIR and extra flags as in train.sh.
exec bash "$(dirname "$0")/train.sh" fp32 8 noxla "$@"
