#!/usr/bin/env bash
# Installs everything this repository needs into the active Python environment, idempotently:
# each component is checked first and only what is missing is installed, so inside NGC's
# TensorFlow container (which ships TensorFlow, Horovod and DALI) it adds light packages and
# a Keras new enough for these scripts, and on a prepared machine it returns in seconds.
#
#   PYTHON=python3 bash scripts/install_deps.sh
#   TF_PIP_EXTRAS=and-cuda HOROVOD_GPU_OPERATIONS=NCCL bash scripts/install_deps.sh  # CUDA image
#
# What TensorFlow, Horovod and the DALI plugin were built against is never changed: every pip
# call after TensorFlow's is constrained to the installed numpy, protobuf, ml-dtypes, h5py,
# TensorFlow, Horovod and DALI. Where no TensorFlow is installed, the pip stack comes from
# requirements.lock (exact versions and hashes, written by scripts/lock.sh from
# common/versions.py's pins, requirements.txt, requirements-test.txt and requirements-profile.txt); the sources of Horovod and the DALI plugin,
# compiled here, are checked against their hashes below.
# Horovod and the DALI TensorFlow plugin are compiled here when missing; the wheels are kept in
# $TF_MODEL_SCRIPTS_CACHE (default ~/.cache/tf-model-scripts) for the next environment with the
# same Python and TensorFlow. Needs root or sudo only when Debian packages are missing (OpenMPI,
# compilers for Horovod).
set -euo pipefail

PY=${PYTHON:-python3}
HOROVOD_VERSION=0.28.1
HOROVOD_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0  # PyPI's sdist
DALI_VERSION=2.4.0  # installed only where no DALI is; the plugin always matches the DALI found
# The DALI TensorFlow plugin's sources (PyPI's sdists) by DALI version: 2.4.0 (the lock's) and
# 1.53.0 (the NGC replica's, scripts/ngc_stack.sh).
declare -A DALI_PLUGIN_SHA256=(
  [2.4.0]=b772882294a6d3e14a6a68ea8ee580594f8f3f881f2d48ac1aedb9641ded46bf
  [1.53.0]=ed4b8acfd12aa9586fa9ca5bd217dc20a5829372749d54bde558371fc8bd5afa)
here=$(cd "$(dirname "$0")/.." && pwd)
cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}

log() { printf '[install_deps] %s\n' "$*"; }
py_ok() { "$PY" - >/dev/null 2>&1 <<<"$1"; }
py_out() { "$PY" -c "$1"; }
versions() { (cd "$here" && "$PY" -m common.versions "$@"); }
pip_install() { "$PY" -m pip install --disable-pip-version-check --no-input -q "$@"; }
# The checks below read one probe of the environment (python -m common.versions --probe: every
# import in one process; TensorFlow's alone takes seconds), made again after each install.
# has NAME COMMAND...: the probe's answer; where the probe has no line for NAME (an import before
# it took the process down), COMMAND's own, in a process of its own. fact NAME: its value.
probe() { state=$(cd "$here" && "$PY" -m common.versions --probe 2>/dev/null || true); }
fact() { sed -n "s/^$1=//p" <<<"$state"; }
has() {
  if grep -q "^$1=" <<<"$state"; then [ -n "$(fact "$1")" ]; else "${@:2}"; fi
}

check_sha256() {  # FILE SHA256: a download that is not the recorded one stops here
  local got
  got=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || { log "$(basename "$1"): SHA-256 $got, not the recorded $2: not used"; exit 1; }
}

sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi

apt_install() {
  command -v apt-get >/dev/null || { log "missing $*, and no apt-get on this machine: install them by hand"; exit 1; }
  log "apt-get install $*"
  mkdir -p "$cache"
  (  # one apt at a time (dpkg allows one): the other stack's install may run beside this one
    flock 9  # (`make deps-all`), and install_test_deps.sh takes the same lock for Slurm
    $sudo_cmd apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "$@" >/dev/null
  ) 9>"$cache/apt.lock"
}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# --- Constraints the environment sets (NGC images may set PIP_CONSTRAINT) --------------------
# Kept for every pip call here, but for the pins that exclude what these scripts install (the
# image's Keras 3.3.2 above all): those are lifted, each with a line.
if [ -n "${PIP_CONSTRAINT:-}" ]; then
  inherited="$work/inherited-constraints.txt"
  rc=0
  # shellcheck disable=SC2086  # PIP_CONSTRAINT is a space-separated list, as pip reads it
  notes=$(cd "$here" && "$PY" -m common.versions --lift-pins "$here/requirements.txt" \
            $PIP_CONSTRAINT 2>&1 >"$inherited") || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
    log "cannot read PIP_CONSTRAINT=$PIP_CONSTRAINT: ${notes##*$'\n'}"
    exit 1
  fi
  if [ -n "$notes" ]; then
    while IFS= read -r line; do
      log "PIP_CONSTRAINT=$PIP_CONSTRAINT: ${line#clash: }"
    done <<<"$notes"
  fi
  if [ "$rc" -eq 3 ]; then
    log "PIP_CONSTRAINT's pins above cannot be met without changing what is installed: remove them from PIP_CONSTRAINT (or unset it) and run again"
    exit 1
  fi
  export PIP_CONSTRAINT="$inherited"
fi

# --- TensorFlow with Keras 3 (kept as is when the image already has it) ---------------------
export TF_CPP_MIN_LOG_LEVEL=3  # the checks below import TensorFlow; keep its start-up quiet
probe
if has tensorflow py_ok 'import tensorflow'; then
  log "tensorflow present: $(fact tensorflow | grep . || py_out 'import tensorflow as tf; print(tf.__version__)')"
elif py_ok 'import importlib.metadata as m; m.distribution("tensorflow")'; then
  # Installing a second TensorFlow over a broken one would hide the cause (often numpy).
  log "tensorflow is installed but fails to import: '$PY -c \"import tensorflow\"' shows why"
  exit 1
else
  # No image fixed the versions: the locked pip stack (scripts/lock.sh), every file checked
  # against its hash: TensorFlow, Keras, DALI and requirements*.txt in one resolution.
  case "${TF_PIP_EXTRAS:-}" in
    "") lock="$here/requirements.lock" ;;
    and-cuda) lock="$here/requirements-cuda.lock" ;;
    *) log "TF_PIP_EXTRAS=$TF_PIP_EXTRAS has no lock file (requirements.lock: none; requirements-cuda.lock: and-cuda)"; exit 1 ;;
  esac
  log "pip install --require-hashes -r $(basename "$lock") (tensorflow${TF_PIP_EXTRAS:+[$TF_PIP_EXTRAS]}==$(versions --pin tensorflow), keras==$(versions --pin keras), DALI $DALI_VERSION, requirements.txt)"
  pip_install --require-hashes -r "$lock"
  probe
fi

# --- What the installed TensorFlow, Horovod and DALI were built against stays as it is --------
constraints="$work/constraints.txt"
"$PY" - >"$constraints" <<'EOF'
import importlib.metadata as md
for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-keras", "numpy", "protobuf",
             "ml-dtypes", "h5py", "horovod", "nvidia-dali-cuda120", "nvidia-dali-cuda110",
             "nvidia-dali-tf-plugin-cuda120", "nvidia-dali-tf-plugin-cuda110", "tensorrt"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
# onnx 1.18 and later use ml_dtypes' float4 types (ml_dtypes 0.5) without saying so in their
# requirements: under an older ml_dtypes (TensorFlow 2.17's 0.4) tf2onnx would fail to import.
try:
    if tuple(int(x) for x in md.version("ml-dtypes").split(".")[:2]) < (0, 5):
        print("onnx<1.18")
except md.PackageNotFoundError:
    pass
EOF
log "keeping $(paste -sd' ' "$constraints")"

# An image whose Keras is older than these scripts need (NGC 25.02 ships 3.3.2) gets the tested
# Keras 3 over it; TensorFlow 2.17 and later accept any Keras 3 >= 3.2.
if ! has keras versions --satisfied keras 2>/dev/null; then
  log "pip install keras==$(versions --pin keras) (found $(py_out 'import keras; print(keras.__version__)' 2>/dev/null || echo none))"
  pip_install -c "$constraints" "keras==$(versions --pin keras)"
  probe
fi

# --- Light Python dependencies (pip is quick when they are already satisfied) -------------------
# With the test and lint tools (the package's "test" extra) that `make test` runs and the
# profiler's (the "profile" extra: --profile).
pip_install -c "$constraints" -r "$here/requirements.txt" -r "$here/requirements-test.txt" \
  -r "$here/requirements-profile.txt"

# A wheel compiled here is kept per package version, Python, TensorFlow and environment.
build_key() {
  py_out 'import hashlib, sys, tensorflow as tf
print(f"cp{sys.version_info[0]}{sys.version_info[1]}-tf{tf.__version__}-"
      + hashlib.sha1(sys.prefix.encode()).hexdigest()[:8])'
}

# --- Horovod with TensorFlow, Gloo and MPI ---------------------------------------------------
# Any Horovod with MPI is kept (NGC's has NCCL too, which a rebuild here would lose).
if has horovod py_ok 'import horovod.tensorflow as hvd; assert hvd.mpi_built()'; then
  log "horovod present: $(fact horovod | grep . || py_out 'import horovod; print(horovod.__version__)')"
else
  missing=()
  command -v mpirun >/dev/null || missing+=(openmpi-bin)
  { command -v mpicxx >/dev/null && [ -n "$(mpicxx --showme:incdirs 2>/dev/null || true)" ]; } \
    || missing+=(libopenmpi-dev)
  command -v cmake >/dev/null || missing+=(cmake)
  command -v g++ >/dev/null || missing+=(g++)
  command -v make >/dev/null || missing+=(make)
  if [ ${#missing[@]} -gt 0 ]; then apt_install "${missing[@]}"; fi

  gpu_ops=${HOROVOD_GPU_OPERATIONS:-cpu}  # NCCL in the CUDA image; passed on to the build
  wheels="$cache/wheels/horovod-$HOROVOD_VERSION-${gpu_ops,,}-$(build_key)"
  if ! compgen -G "$wheels/horovod-*.whl" >/dev/null; then
    log "building horovod==$HOROVOD_VERSION from source (about 3 minutes on 2 cores)"
    "$PY" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
      "horovod==$HOROVOD_VERSION" -d "$work"
    check_sha256 "$work/horovod-$HOROVOD_VERSION.tar.gz" "$HOROVOD_SHA256"
    tar -xzf "$work/horovod-$HOROVOD_VERSION.tar.gz" -C "$work"
    # xla_mpi_ops.cc includes XLA headers that moved in TF >= 2.16; it only provides Horovod ops
    # inside XLA clusters on GPU. Compile its body only where those headers still exist.
    xla_ops="$work/horovod-$HOROVOD_VERSION/horovod/tensorflow/xla_mpi_ops.cc"
    sed -i 's|^#if TENSORFLOW_VERSION >= 2006000000$|#if TENSORFLOW_VERSION >= 2006000000 \&\& HAVE_GPU \&\& __has_include("tensorflow/compiler/xla/client/xla_builder.h")|' "$xla_ops"
    grep -q '__has_include("tensorflow/compiler/xla/client/xla_builder.h")' "$xla_ops" \
      || { log "could not patch $xla_ops: the Horovod source is not the expected one"; exit 1; }
    # Horovod's setup.py builds RelWithDebInfo (-O3 -g): CMake's Release is the same
    # optimisation without the debug information, which costs compiler time on every machine
    # that installs (docs/testing.md, "Installs") and makes a 16 MB wheel of a 1 MB one.
    setup_py="$work/horovod-$HOROVOD_VERSION/setup.py"
    sed -i "s/else 'RelWithDebInfo'$/else 'Release'/" "$setup_py"
    grep -q "else 'Release'$" "$setup_py" \
      || { log "could not patch $setup_py: the Horovod source is not the expected one"; exit 1; }
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS="-j$(nproc)" \
      "$PY" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps \
        -w "$work/wheel" "$work/horovod-$HOROVOD_VERSION"
    mkdir -p "$(dirname "$wheels")" && rm -rf "$wheels" && mv "$work/wheel" "$wheels"
  else
    log "horovod==$HOROVOD_VERSION wheel for this Python and TensorFlow found in $wheels"
  fi
  pip_install -c "$constraints" "$wheels"/horovod-*.whl
  py_ok 'import horovod.tensorflow as hvd; assert hvd.mpi_built() and hvd.gloo_built()' \
    || { log "horovod installed but lacks MPI or Gloo support"; exit 1; }
  probe
fi
command -v mpirun >/dev/null || apt_install openmpi-bin

# --- DALI and its TensorFlow plugin (the plugin's version always equals DALI's) ---------------
if has dali py_ok 'import nvidia.dali'; then
  log "dali present: $(fact dali | grep . || py_out 'import nvidia.dali as d; print(d.__version__)')"
else
  log "pip install nvidia-dali-cuda120==$DALI_VERSION (a 424 MB wheel)"
  pip_install -c "$constraints" "nvidia-dali-cuda120==$DALI_VERSION"
  probe
fi
if has dali_tf py_ok 'import nvidia.dali.plugin.tf'; then
  log "dali tensorflow plugin present"
else
  dali_version=$(py_out 'import nvidia.dali as d; print(d.__version__)')
  wheels="$cache/wheels/dali-tf-plugin-$dali_version-$(build_key)"
  if ! compgen -G "$wheels/*.whl" >/dev/null; then
    log "building nvidia-dali-tf-plugin-cuda120==$dali_version against the installed TensorFlow"
    "$PY" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
      "nvidia-dali-tf-plugin-cuda120==$dali_version" -d "$work/plugin-src"
    sdist=$(compgen -G "$work/plugin-src/*.tar.gz" | head -1)
    if [ -n "${DALI_PLUGIN_SHA256[$dali_version]:-}" ]; then
      check_sha256 "$sdist" "${DALI_PLUGIN_SHA256[$dali_version]}"
    else
      log "no hash is recorded for the DALI plugin $dali_version (the image's DALI): its source is not checked"
    fi
    "$PY" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps \
      --no-cache-dir -w "$work/plugin" "$sdist"
    mkdir -p "$(dirname "$wheels")" && rm -rf "$wheels" && mv "$work/plugin" "$wheels"
  else
    log "dali tensorflow plugin wheel for this Python and TensorFlow found in $wheels"
  fi
  pip_install -c "$constraints" --no-deps "$wheels"/*.whl
  py_ok 'import nvidia.dali.plugin.tf' \
    || { log "the DALI TensorFlow plugin does not import: '$PY -c \"import nvidia.dali.plugin.tf\"' shows why"; exit 1; }
  probe
fi

# --- This repository, editable: common/, benchtools/ and the three model packages -----------
# No script edits sys.path: they import the packages setup.py maps (from common/models.py). A
# Docker layer that has only the dependency files sets INSTALL_DEPS_STACK_ONLY=1 and runs this
# again after COPY.
if [ "${INSTALL_DEPS_STACK_ONLY:-0}" = 1 ]; then
  log "INSTALL_DEPS_STACK_ONLY=1: the stack only; this repository itself is not installed"
else
  installed_at=$(cd / && "$PY" -c 'import os, common, benchtools, rn50, ssd, txl
roots = {os.path.dirname(os.path.dirname(m.__file__)) for m in (common, benchtools)}
roots |= {os.path.dirname(os.path.dirname(os.path.dirname(m.__file__))) for m in (rn50, ssd, txl)}
print(roots.pop() if len(roots) == 1 else "")' 2>/dev/null || true)
  if [ "$installed_at" = "$here" ]; then
    log "this repository is installed (editable) from $here"
  else
    log "pip install --no-deps -e $here${installed_at:+ (was installed from $installed_at)}"
    mkdir -p "$cache"
    (  # one build in the checkout at a time: both stacks' installs may reach it together
      flock 9
      pip_install --no-deps --no-build-isolation -e "$here"
    ) 9>"$cache/editable.lock"
  fi
fi

# --- The stack these scripts will see (the same check main.py makes at start-up) -------------
# The probe's line, or where it found a problem (or has no line), the check's own, which names it.
if [ -n "$(fact stack)" ]; then log "stack: $(fact stack)"; else log "stack: $(versions)"; fi
