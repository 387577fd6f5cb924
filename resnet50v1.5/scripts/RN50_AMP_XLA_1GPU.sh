#!/usr/bin/env bash
# ResNet-50 v1.5, 90 epochs, AMP + XLA on 1 GPU(s). DATA_DIR, RESULTS_DIR and extra flags as in train.sh.
exec bash "$(dirname "$0")/train.sh" amp 1 xla "$@"
