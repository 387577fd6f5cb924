#!/usr/bin/env bash
# NVIDIA Model Optimizer (nvidia-modelopt[onnx]) in an environment of its own, for
# --export_onnx_int8 (common/export/onnx_int8.py runs its ONNX quantization there). Apart from
# TensorFlow's environment: Model Optimizer needs PyTorch, and each pins its own CUDA libraries,
# numpy and onnx. Made with the machine's python3 (MODELOPT_BASE_PYTHON) whatever stack trains.
# Idempotent: returns at once when it is there; prints its python as the last line.
#   bash scripts/modelopt_env.sh           # make it (about 6 GB: PyTorch with its CUDA libraries)
#   bash scripts/modelopt_env.sh --where   # where it is or would be (exit 1 when not made)
# Or point MODELOPT_PYTHON at a python that has nvidia-modelopt[onnx] (NVIDIA's PyTorch and
# TensorRT containers can: pip install 'nvidia-modelopt[onnx]').
set -euo pipefail

PY=${MODELOPT_BASE_PYTHON:-python3}
TORCH=2.14.1 MODELOPT=0.47.0
log() { printf '[modelopt_env] %s\n' "$*" >&2; }
source "$(dirname "$0")/side_env.sh"
side_env "$PY" "modelopt$MODELOPT-torch$TORCH" \
  "torch $TORCH, nvidia-modelopt[onnx] $MODELOPT (about 6 GB, a few minutes)" \
  "import modelopt.onnx.quantization" "$([ "${1:-}" = --where ] && echo 1 || echo 0)" \
  "torch==$TORCH" "nvidia-modelopt[onnx]==$MODELOPT"
