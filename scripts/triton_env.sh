#!/usr/bin/env bash
# An environment for Triton on a machine without Triton's containers: Triton's Python client
# (tritonclient, HTTP and gRPC), PyTriton (nvidia-pytriton, which ships Triton's server binary
# and serves a Python function: scripts/serve_pytriton.py serves an export's SavedModel with
# it), TensorFlow and Pillow. Apart from the training environment: PyTriton 0.7 needs numpy 1
# and tritonclient's gRPC needs protobuf 6, where TensorFlow 2.21's stack has numpy 2 and
# protobuf 7 (and NGC 25.02's protobuf 4). Made with the machine's python3 whatever stack runs
# the suite. Idempotent: returns at once when it is there; prints the python as its last line.
#   TRITON_PYTHON=python3 bash scripts/triton_env.sh
# On GPU machines use Triton's own containers instead (README, "Deployment").
set -euo pipefail

PY=${TRITON_PYTHON:-python3}
TF=2.21.0 NUMPY=1.26.4 PYTRITON=0.7.0 TRITONCLIENT=2.73.0 PILLOW=13.0.0 ORT=1.32.0
log() { printf '[triton_env] %s\n' "$*" >&2; }
source "$(dirname "$0")/side_env.sh"
side_env "$PY" "triton-pytriton$PYTRITON-tf$TF" \
  "tensorflow $TF, nvidia-pytriton $PYTRITON, tritonclient $TRITONCLIENT, onnxruntime $ORT (about 2.6 GB)" \
  "import tensorflow, pytriton, tritonclient.grpc, tritonclient.http, PIL, onnxruntime" 0 \
  "tensorflow==$TF" "numpy==$NUMPY" "nvidia-pytriton==$PYTRITON" \
  "tritonclient[grpc,http]==$TRITONCLIENT" "pillow==$PILLOW" "onnxruntime==$ORT"
