#!/usr/bin/env bash
# The Python that NVIDIA's Triton container, built by docker/Dockerfile.triton, runs its Python
# backend with, reproduced without Docker: Python 3.12 (the container's, Ubuntu 24.04's) holding
# exactly docker/triton-requirements.lock (docker/triton-requirements.txt and what it brings, at
# the versions and hashes docker/Dockerfile.triton installs), nothing else. With
# serving/tritonserver.py, TRITONSERVER_PYTHON set to it runs the repository's Python models as
# the container would:
#   TRITONSERVER_PYTHON=$(bash scripts/triton_container_env.sh) \
#     "$(bash scripts/triton_env.sh)" -m serving.tritonserver --model-repository=/results/triton/cpu
# Idempotent: returns at once when it is there; prints the python as its last line.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REQUIREMENTS=$HERE/../docker/triton-requirements.lock
TAG=$(sha256sum <"$REQUIREMENTS" | cut -c1-8)
log() { printf '[triton_container_env] %s\n' "$*" >&2; }
source "$HERE/side_env.sh"
PY=${TRITON_CONTAINER_PYTHON:-$(find_python 3.12 || true)}
[ -n "$PY" ] || { log "no python3.12 on PATH or in pyenv: the container's Python is 3.12; install it (pyenv install 3.12)"; exit 1; }
side_env "$PY" "triton-container-req$TAG" \
  "docker/triton-requirements.lock alone, as docker/Dockerfile.triton installs it (about 1.5 GB)" \
  "import tensorflow, onnxruntime, numpy" 0 --require-hashes -r "$REQUIREMENTS"
