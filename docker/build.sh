#!/usr/bin/env bash
# Builds the image from the repository root: bash docker/build.sh [docker build flags]
set -euo pipefail
cd "$(dirname "$0")/.."
# The commit built, which the image's version and model cards record (.git is not copied in).
commit=$(git rev-parse HEAD 2>/dev/null || true)
dirty=false
[ -z "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] || dirty=true
docker build . -t "${IMAGE:-tf-model-scripts:latest}" --build-arg "GIT_COMMIT=$commit" \
  --build-arg "GIT_DIRTY=$dirty" "$@"
