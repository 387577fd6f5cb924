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
# PyTorch comes from PyPI (its CUDA build, whatever the host) unless MODELOPT_TORCH names another
# (a requirement or a wheel file) and MODELOPT_TORCH_INDEX the index it is on; on a host without
# a GPU, PyTorch's CPU build is about 0.2 GB:
#   MODELOPT_TORCH=torch==2.14.1+cpu MODELOPT_TORCH_INDEX=https://download.pytorch.org/whl/cpu \
#     bash scripts/modelopt_env.sh
# Each PyTorch gets an environment of its own; the one installed is said when it is made.
set -euo pipefail

PY=${MODELOPT_BASE_PYTHON:-python3}
TORCH=2.14.1 MODELOPT=0.47.0
TORCH_SPEC=${MODELOPT_TORCH:-torch==$TORCH}
log() { printf '[modelopt_env] %s\n' "$*" >&2; }
source "$(dirname "$0")/side_env.sh"
name="modelopt$MODELOPT-torch$TORCH"
index=()
if [ -n "${MODELOPT_TORCH:-}" ]; then  # its own environment, named after what was asked for
  name="modelopt$MODELOPT-$(printf '%s' "$(basename "$TORCH_SPEC")" | tr -c 'A-Za-z0-9.+_=-' '_' | cut -c1-60)"
fi
if [ -n "${MODELOPT_TORCH_INDEX:-}" ]; then
  index=(--extra-index-url "$MODELOPT_TORCH_INDEX")
fi
where=$([ "${1:-}" = --where ] && echo 1 || echo 0)
if [ "$where" = 0 ] && [ -z "${MODELOPT_TORCH:-}" ] && ! command -v nvidia-smi >/dev/null; then
  log "no GPU here: PyPI's PyTorch is its CUDA build (about 6 GB); MODELOPT_TORCH and MODELOPT_TORCH_INDEX choose another (this script's header)"
fi
size="PyTorch's CUDA build: about 6 GB, a few minutes"
[ -z "${MODELOPT_TORCH:-}" ] || size="the PyTorch asked for"
py=$(side_env "$PY" "$name" "$TORCH_SPEC, nvidia-modelopt[onnx] $MODELOPT ($size)" \
  "import modelopt.onnx.quantization" "$where" \
  "${index[@]}" "$TORCH_SPEC" "nvidia-modelopt[onnx]==$MODELOPT") || { echo "$py"; exit 1; }
if [ "$where" = 0 ]; then
  # Read once per environment (importing PyTorch takes seconds), kept beside it.
  build="$(dirname "$(dirname "$py")")/.torch-build"
  [ -s "$build" ] || "$py" -c 'import torch; print(torch.__version__, "(CUDA " + torch.version.cuda + ")" if torch.version.cuda else "(CPU build)")' >"$build" 2>/dev/null || rm -f "$build"
  log "PyTorch there: $(cat "$build" 2>/dev/null || echo unknown)"
fi
echo "$py"
