#!/usr/bin/env bash
# PyTorch, torchvision, timm and safetensors for the test that compares an imported ResNet-50
# with torchvision's and timm's own models (tests/test_import_weights.py runs
# tests/torch_reference.py there and reads its files). They go into Model Optimizer's
# environment (scripts/modelopt_env.sh, which `make test` needs anyway), beside its PyTorch: one
# PyTorch of about 6 GB to install, not two. Apart from TensorFlow's environment (each pins its
# own numpy and CUDA libraries), made with the machine's Python 3.11 whatever stack runs the
# suite (the NGC replica's is 3.12).
# Idempotent: returns at once when it is there; prints the virtualenv's python as its last line.
#   TORCH_PYTHON=python3 bash tests/torch_env.sh
set -euo pipefail

PY=${TORCH_PYTHON:-python3}
TORCHVISION=0.29.1 TIMM=1.0.31 SAFETENSORS=0.8.0
here=$(cd "$(dirname "$0")" && pwd)
log() { printf '[torch_env] %s\n' "$*" >&2; }
py=$(MODELOPT_BASE_PYTHON="$PY" bash "$here/../scripts/modelopt_env.sh" | tail -n 1)
source "$here/../scripts/side_env.sh"
venv=$(dirname "$(dirname "$py")")
name=$(basename "$venv")
# What is there already, named as installed: a failed completion remakes the environment whole.
there=$("$py" -c 'import importlib.metadata as md
print("torch==" + md.version("torch"), "nvidia-modelopt[onnx]==" + md.version("nvidia-modelopt"))')
# shellcheck disable=SC2086  # two requirements, split on purpose
side_env "$PY" "${name%-py*}" "torchvision $TORCHVISION, timm $TIMM beside its PyTorch" \
  "import torchvision, timm, safetensors, modelopt.onnx.quantization" 0 \
  $there "torchvision==$TORCHVISION" "timm==$TIMM" "safetensors==$SAFETENSORS"
