#!/usr/bin/env bash
# Builds this export's TensorRT engines on the GPU that will serve them (an engine is tied to its
# GPU and TensorRT version: build them in nvcr.io/nvidia/tensorrt:@RELEASE@-py3, whose TensorRT
# is that of the Triton @RELEASE@ image docker/Dockerfile.triton builds), then moves each model, its
# config and plan, into the triton/ repository whole and, for an image model, points its
# ensemble at the FP16 engine. Written beside the repositories by --export_triton from
# common/export/triton/build_engines.sh, its values filled in: the engines and the ensemble.
#   bash build_engines.sh [--dry-run]      (REPO=... for a repository moved elsewhere)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=${REPO:-${HERE%.tensorrt}/triton}
# Each engine: its model | trtexec's precision flags beside --fp16 | its smallest, optimal and
# largest input shapes.
ENGINES=(
@ENGINES@
)
ENSEMBLE=@ENSEMBLE@  # the ensemble the FP16 engine serves, or none
DRY=0; [ "${1:-}" = --dry-run ] && DRY=1
run() { echo "+ $*"; [ "$DRY" = 1 ] || "$@"; }
if [ "$DRY" = 0 ] && ! command -v trtexec >/dev/null; then
  echo "build_engines.sh: trtexec is not on PATH: run this in NVIDIA's TensorRT container (nvcr.io/nvidia/tensorrt:@RELEASE@-py3, the release of the Triton image that serves the engines) on the serving GPU" >&2
  exit 2
fi
[ -d "$REPO" ] || { echo "build_engines.sh: no repository at $REPO (set REPO)" >&2; exit 2; }
install() {  # MODEL: its config and plan into "$REPO/MODEL", whole
  local m=$1 staged="$HERE/.$1.installing"
  run rm -rf "$staged"
  run mkdir -p "$staged/1"
  run cp "$HERE/$m/config.pbtxt" "$staged/"
  [ ! -f "$HERE/$m/labels.txt" ] || run cp "$HERE/$m/labels.txt" "$staged/"
  run mv "$HERE/$m/model.plan" "$staged/1/model.plan"
  run rm -rf "${REPO:?}/$m"
  run mv "$staged" "$REPO/$m"
}
card() {  # MODEL: its engine's SHA-256 in the model card beside the model clients call
  local dir="$REPO/$ENSEMBLE" file="$1/1/model.plan" sum
  [ "$DRY" = 0 ] && [ -n "$ENSEMBLE" ] && [ -f "$dir/model_card.json" ] || return 0
  sum=$(sha256sum "$REPO/$file" | cut -d' ' -f1)
  echo "- \`$file\`: sha256 \`$sum\`" >>"$dir/README.md"  # its last section: served files
  python3 - "$dir/model_card.json" "$file" "$sum" <<'PY'
import json, sys
path, name, digest = sys.argv[1:]
with open(path, encoding="utf-8") as fh:
    card = json.load(fh)
card.setdefault("served_files", {})[name] = digest
with open(path + ".new", "w", encoding="utf-8") as fh:
    fh.write(json.dumps(card, indent=1) + "\n")
PY
  mv "$dir/model_card.json.new" "$dir/model_card.json"
}
built=()
for engine in "${ENGINES[@]}"; do
  IFS='|' read -r model flags min opt max <<<"$engine"
  # shellcheck disable=SC2086  # flags: none, or --int8
  run trtexec --onnx="$HERE/$model/model.onnx" --saveEngine="$HERE/$model/model.plan" $flags \
    --fp16 --minShapes="$min" --optShapes="$opt" --maxShapes="$max"
  install "$model"
  card "$model"
  built+=("$model")
done
[ -z "$ENSEMBLE" ] || run cp "$HERE/$ENSEMBLE/config.pbtxt" "$REPO/$ENSEMBLE/config.pbtxt"
if [ "$DRY" = 1 ]; then
  echo "dry run: nothing was built or installed (the commands above would build and install ${built[*]} in $REPO)"
  exit 0
fi
echo "installed in $REPO: ${built[*]}${ENSEMBLE:+; the ensemble $ENSEMBLE now runs ${built[0]}} (a running server picks them up with --model-control-mode=poll, or at its next start)"
