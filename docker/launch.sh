#!/usr/bin/env bash
# Starts the container with all GPUs, the data and results directories mounted, and the shared
# memory and ulimits NVIDIA recommends for multi-GPU training.
#   DATA_DIR=/raid/imagenet RESULTS_DIR=$PWD/results bash docker/launch.sh [command]
set -euo pipefail
DATA_DIR=${DATA_DIR:-/data}
RESULTS_DIR=${RESULTS_DIR:-$(pwd)/results}
mkdir -p "$RESULTS_DIR"
docker run -it --rm --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864 \
  -v "$DATA_DIR":/data -v "$RESULTS_DIR":/results \
  "${IMAGE:-tf-model-scripts:latest}" "${@:-bash}"
