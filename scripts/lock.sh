#!/usr/bin/env bash
# Writes the lock files of the pip stack (exact versions and SHA-256 hashes of every file pip
# may take, for Python 3.11 and later on Linux): what scripts/install_deps.sh installs where no
# image fixes the versions already (a bare machine, docker/Dockerfile.cuda).
#   requirements.lock       TensorFlow and Keras (common/versions.py's pins), DALI, requirements.txt
#                           and requirements-test.txt
#   requirements-cuda.lock  the same with tensorflow[and-cuda] (CUDA and cuDNN from pip)
#   docker/triton-requirements.lock
#                           docker/triton-requirements.txt for the Python of NVIDIA's Triton
#                           container (3.12, x86_64): what docker/Dockerfile.triton installs
# Run it after changing a pin or a requirements file; tests/test_lock.py checks that they agree.
# The versions already locked are kept (uv prefers what its output file pins), so adding a
# requirement changes only what it brings; LOCK_UPGRADE=1 takes the newest of everything.
# Needs uv (pip install uv); reads the package index, installs nothing.
#   bash scripts/lock.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
command -v uv >/dev/null || { echo "lock.sh: error: uv is missing: pip install uv" >&2; exit 2; }
tf=$("$PY" -m common.versions --pin tensorflow)
keras=$("$PY" -m common.versions --pin keras)
dali=$(sed -n 's/^DALI_VERSION=\([0-9.]*\).*/\1/p' scripts/install_deps.sh)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for variant in "" cuda; do
  extra=${variant:+[and-cuda]}
  printf 'tensorflow%s==%s\nkeras==%s\nnvidia-dali-cuda120==%s\n' "$extra" "$tf" "$keras" \
    "$dali" >"$work/pins.in"
  out=requirements${variant:+-$variant}.lock
  upgrade=()
  if [ "${LOCK_UPGRADE:-0}" = 1 ]; then upgrade=(--upgrade)
  elif [ -f "$out" ]; then cp "$out" "$work/$out"; fi  # uv keeps the versions it finds there
  uv pip compile "$work/pins.in" requirements.txt requirements-test.txt requirements-profile.txt --universal --python-version 3.11 \
    --generate-hashes --no-header --no-annotate --quiet "${upgrade[@]}" -o "$work/$out"
  { echo "# The pip stack, locked by scripts/lock.sh (uv pip compile --universal --generate-hashes)"
    echo "# from tensorflow$extra==$tf, keras==$keras, nvidia-dali-cuda120==$dali and requirements.txt."
    echo "# scripts/install_deps.sh installs it with pip install --require-hashes where no"
    echo "# TensorFlow is installed; do not edit: run bash scripts/lock.sh."
    cat "$work/$out"; } >"$out"
  echo "lock.sh: wrote $out ($(grep -c '==' "$out") packages)"
done
# The Triton image's Python packages: every one pinned with its hashes, not only the three the
# requirements name (a rebuilt image got whatever versions pip found that day).
out=docker/triton-requirements.lock
[ "${LOCK_UPGRADE:-0}" = 1 ] || [ ! -f "$out" ] || cp "$out" "$work/triton.lock"
uv pip compile docker/triton-requirements.txt --python-version 3.12 \
  --python-platform x86_64-manylinux_2_28 --generate-hashes --no-header --no-annotate --quiet \
  -o "$work/triton.lock"
{ echo "# The Python packages of docker/Dockerfile.triton's image (Python 3.12, x86_64), locked by"
  echo "# scripts/lock.sh (uv pip compile --generate-hashes) from docker/triton-requirements.txt;"
  echo "# installed with pip install --require-hashes. Do not edit: run bash scripts/lock.sh."
  cat "$work/triton.lock"; } >"$out"
echo "lock.sh: wrote $out ($(grep -c '==' "$out") packages)"
