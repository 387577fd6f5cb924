#!/usr/bin/env bash
# Builds the image from the repository root: bash docker/build.sh [docker build flags]
set -euo pipefail
cd "$(dirname "$0")/.."
docker build . -t "${IMAGE:-tf-model-scripts:latest}" "$@"
