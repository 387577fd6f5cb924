#!/usr/bin/env bash
# A replica of the Python stack of NVIDIA's last TensorFlow container, nvcr.io/nvidia/tensorflow:
# 25.02-tf2-py3, in a virtual environment: how its users run this repository, testable without
# Docker or a GPU. Built once and kept (a marker records what it was built from); each later call
# puts the image's own versions back (Keras 3.3.2 above all), so that `make test-ngc` always
# starts from the stock image and then runs scripts/install_deps.sh over it, the Dockerfile's step.
#
#   bash scripts/ngc_stack.sh [VENV]          # default ~/.cache/tf-model-scripts/venvs/ngc-25.02
#   bash scripts/ngc_stack.sh --check [VENV]  # after install_deps.sh: what the image's TensorFlow
#                                             # was built against is as the image has it
#
# The image's packages and what stands in for them here (see README "Where it runs"):
#   Python 3.12.3 -> 3.12 (pyenv's or python3.12 on PATH); TensorFlow 2.17.0, Keras 3.3.2,
#   tf_keras 2.17.0, numpy 1.26.4, TensorBoard 2.17.1: the same versions from PyPI;
#   DALI 1.46.0 -> 1.53.0 (PyPI's 1.46.0 is a stub that downloads from NVIDIA's own index);
#   Horovod 0.28.1 and the DALI TensorFlow plugin: compiled against TF 2.17 by install_deps.sh
#   (the image ships them prebuilt, and install_deps.sh keeps an image's own).
set -euo pipefail

check=0
if [ "${1:-}" = --check ]; then check=1; shift; fi
cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
VENV=${1:-$cache/venvs/ngc-25.02}
PYTHON_SERIES=3.12
IMAGE_PACKAGES=(tensorflow==2.17.0 keras==3.3.2 tf-keras==2.17.0 numpy==1.26.4 tensorboard==2.17.1
                nvidia-dali-cuda120==1.53.0)
log() { printf '[ngc_stack] %s\n' "$*"; }
pip_install() { "$VENV/bin/python" -m pip install --disable-pip-version-check --no-input -q "$@"; }
source "$(dirname "$0")/side_env.sh"  # find_python

# What the image's TensorFlow, Horovod and DALI plugin were built against, with its versions:
# install_deps.sh must leave every one of these as the image has it.
protected() {
  "$VENV/bin/python" -c 'import importlib.metadata as md
for name in ("tensorflow", "numpy", "protobuf", "ml-dtypes", "h5py", "tf-keras", "tensorboard",
             "nvidia-dali-cuda120"):
    print(f"{name}=={md.version(name)}")'
}

if [ $check = 1 ]; then
  if ! diff "$VENV/.ngc-image-protected" <(protected) >&2; then
    log "install_deps.sh changed what the image's TensorFlow was built against (< image, > now)"
    exit 1
  fi
  log "as in the image after install_deps.sh: $(paste -sd' ' "$VENV/.ngc-image-protected")"
  exit 0
fi

spec="python$PYTHON_SERIES ${IMAGE_PACKAGES[*]}"
# NGC images may pin their packages for pip (PIP_CONSTRAINT=/etc/pip/constraint.txt): the
# replica's pins, which `make ngc-deps` sets for install_deps.sh as the image would.
write_constraints() {
  { echo "# The image's versions, as an NGC container's PIP_CONSTRAINT file pins them"
    printf '%s\n' "${IMAGE_PACKAGES[@]}"
    grep -v -E '^(tensorflow|numpy|tf-keras|tensorboard|nvidia-dali-cuda120)==' \
      "$VENV/.ngc-image-protected"; } >"$VENV/pip-constraint.txt"
}

if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.ngc-image" 2>/dev/null)" = "$spec" ] \
    && [ -f "$VENV/.ngc-image-protected" ]; then
  log "replica present: $VENV; putting the image's own versions back"
  pip_install "${IMAGE_PACKAGES[@]}"
  write_constraints
  exit 0
fi

python=$(find_python "$PYTHON_SERIES" || true)
[ -n "$python" ] || { log "no python$PYTHON_SERIES on PATH or in pyenv: the container's Python is $PYTHON_SERIES; install it (pyenv install $PYTHON_SERIES)"; exit 1; }

log "building the replica in $VENV with $("$python" --version) and ${IMAGE_PACKAGES[*]}"
rm -rf "$VENV"
"$python" -m venv "$VENV"
pip_install --upgrade pip
pip_install "${IMAGE_PACKAGES[@]}"
protected >"$VENV/.ngc-image-protected"
write_constraints
echo "$spec" >"$VENV/.ngc-image"
log "replica ready: $(paste -sd' ' "$VENV/.ngc-image-protected")"
