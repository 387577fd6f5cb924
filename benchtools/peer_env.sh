#!/usr/bin/env bash
# The benchmark-only environment of the peers (keras-hub's RetinaNet and GPT-2), without
# touching the project's: a virtualenv that sees the active Python's packages
# (--system-site-packages), into which keras-hub goes with its requirements except
# tensorflow-text (the detector and the language model do not use it, and it would pull in
# another TensorFlow). Every pip call is constrained to the TensorFlow, Keras, numpy, protobuf,
# ml-dtypes and h5py that are installed, so the peers run on the project's stack exactly.
# Idempotent; prints the virtualenv's python as its last line.
#
#   PYTHON=python3 bash benchtools/peer_env.sh
set -euo pipefail

PY=${PYTHON:-python3}
KERAS_HUB_VERSION=${KERAS_HUB_VERSION:-0.32.0}
cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
tag=$("$PY" -c 'import sys, importlib.metadata as m
print("py%d.%d-tf%s" % (*sys.version_info[:2], m.version("tensorflow")))')
venv="$cache/venvs/peers-$tag"
log() { printf '[peer_env] %s\n' "$*" >&2; }

if [ -x "$venv/bin/python" ] && "$venv/bin/python" - >/dev/null 2>&1 <<EOF
import importlib.metadata as m
assert m.version("keras-hub") == "$KERAS_HUB_VERSION"
import keras_hub  # noqa: F401
EOF
then
  log "keras-hub $KERAS_HUB_VERSION ready in $venv"
  echo "$venv/bin/python"
  exit 0
fi

log "making $venv (sees $("$PY" -c 'import sys; print(sys.prefix)')'s packages)"
"$PY" -m venv --system-site-packages "$venv"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PY" - >"$work/constraints.txt" <<'EOF'
import importlib.metadata as md
for name in ("tensorflow", "keras", "numpy", "protobuf", "ml-dtypes", "h5py"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
EOF
pip() { "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q "$@"; }
pip --no-deps "keras-hub==$KERAS_HUB_VERSION"
"$venv/bin/python" - >"$work/requirements.txt" <<'EOF'
import importlib.metadata as md
from packaging.requirements import Requirement
for line in md.requires("keras-hub") or []:
    req = Requirement(line)
    if req.name != "tensorflow-text" and not (req.marker and "extra" in str(req.marker)):
        print(req)
EOF
log "keras-hub's requirements but tensorflow-text: $(paste -sd' ' "$work/requirements.txt")"
pip -r "$work/requirements.txt" -c "$work/constraints.txt"
"$venv/bin/python" -c 'import keras_hub' >/dev/null 2>&1 || {
  log "keras_hub does not import in $venv: '$venv/bin/python -c \"import keras_hub\"' shows why"
  exit 1
}
log "keras-hub $KERAS_HUB_VERSION ready in $venv"
echo "$venv/bin/python"
