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
cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
tag=$("$PY" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
venv="$cache/venvs/modelopt$MODELOPT-torch$TORCH-$tag"
log() { printf '[modelopt_env] %s\n' "$*" >&2; }
check='import modelopt.onnx.quantization'

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "$check" >/dev/null 2>&1; then
  echo "$venv/bin/python"
  exit 0
fi
if [ "${1:-}" = --where ]; then
  echo "$venv/bin/python"
  exit 1
fi
log "making $venv: torch $TORCH, nvidia-modelopt[onnx] $MODELOPT (about 6 GB, a few minutes)"
rm -rf "$venv"
"$PY" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
  "torch==$TORCH" "nvidia-modelopt[onnx]==$MODELOPT" >&2
"$venv/bin/python" -c "$check" || { log "Model Optimizer does not import in $venv"; exit 1; }
log "ready: $venv"
echo "$venv/bin/python"
