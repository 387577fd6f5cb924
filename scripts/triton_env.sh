#!/usr/bin/env bash
# An environment for Triton on a machine without Triton's containers: what the repository's
# Python-backend models import (docker/triton-requirements.txt: TensorFlow, ONNX Runtime, numpy,
# the same pins NVIDIA's container gets from docker/Dockerfile.triton), PyTriton
# (nvidia-pytriton, which ships Triton's server binary: serving/tritonserver.py starts it, and
# serving/pytriton_server.py serves an export's SavedModel with it), Triton's Python client
# (tritonclient, HTTP and gRPC) and Pillow. Apart from the training environment: PyTriton 0.7
# needs numpy 1 and tritonclient's gRPC needs protobuf 6, where TensorFlow 2.21's stack has
# numpy 2 and protobuf 7 (and NGC 25.02's protobuf 4). Made with the machine's python3 whatever
# stack runs the suite. Idempotent: returns at once when it is there; prints the python as its
# last line.
#   TRITON_PYTHON=python3 bash scripts/triton_env.sh
# On GPU machines use Triton's own containers instead (docs/deployment.md).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
PY=${TRITON_PYTHON:-python3}
REQUIREMENTS=$HERE/../docker/triton-requirements.txt
PYTRITON=0.7.0 TRITONCLIENT=2.73.0 PILLOW=13.0.0
# The environment is named after what it holds: a change to the requirements makes a new one.
TAG=$(sha256sum <"$REQUIREMENTS" | cut -c1-8)
log() { printf '[triton_env] %s\n' "$*" >&2; }
source "$HERE/side_env.sh"
side_env "$PY" "triton-pytriton$PYTRITON-req$TAG" \
  "docker/triton-requirements.txt, nvidia-pytriton $PYTRITON, tritonclient $TRITONCLIENT (about 2.6 GB)" \
  "import tensorflow, pytriton, tritonclient.grpc, tritonclient.http, PIL, onnxruntime" 0 \
  -r "$REQUIREMENTS" "nvidia-pytriton==$PYTRITON" "tritonclient[grpc,http]==$TRITONCLIENT" \
  "pillow==$PILLOW"
