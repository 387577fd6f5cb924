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
cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
tag=$("$PY" -c 'import sys; print("py%d.%d" % sys.version_info[:2])')
venv="$cache/venvs/torch$TORCH-$tag"
log() { printf '[torch_env] %s\n' "$*" >&2; }

if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torchvision, timm, safetensors" \
    >/dev/null 2>&1; then
  echo "$venv/bin/python"
  exit 0
fi
log "making $venv: torch $TORCH, torchvision $TORCHVISION, timm $TIMM (about 5 GB, a minute or two)"
rm -rf "$venv"
"$PY" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q \
  "torch==$TORCH" "torchvision==$TORCHVISION" "timm==$TIMM" "safetensors==$SAFETENSORS" >&2
"$venv/bin/python" -c "import torchvision, timm, safetensors" || {
  log "torchvision or timm does not import in $venv"; exit 1; }
log "ready: $venv"
echo "$venv/bin/python"
