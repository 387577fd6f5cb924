#!/usr/bin/env bash
# PyTorch, torchvision, timm and safetensors in a virtual environment of their own: the test
# that compares an imported ResNet-50 with torchvision's and timm's own models
# (tests/test_import_weights.py) runs tests/torch_reference.py there and reads its files. It is
# kept apart from TensorFlow's environment (each pins its own numpy and CUDA libraries) and
# made with the machine's Python 3.11 whatever stack runs the suite (the NGC replica's is 3.12).
# Idempotent: returns at once when it is there; prints the virtualenv's python as its last line.
#   TORCH_PYTHON=python3 bash tests/torch_env.sh
set -euo pipefail

PY=${TORCH_PYTHON:-python3}
TORCH=2.14.1 TORCHVISION=0.29.1 TIMM=1.0.31 SAFETENSORS=0.8.0
log() { printf '[torch_env] %s\n' "$*" >&2; }
source "$(dirname "$0")/../scripts/side_env.sh"
side_env "$PY" "torch$TORCH" \
  "torch $TORCH, torchvision $TORCHVISION, timm $TIMM (about 5 GB, a minute or two)" \
  "import torchvision, timm, safetensors" 0 \
  "torch==$TORCH" "torchvision==$TORCHVISION" "timm==$TIMM" "safetensors==$SAFETENSORS"
