#!/usr/bin/env bash
# Test perplexity with NVIDIA's protocol (16 streams, segments of 64, memory 640, clamp_len 400,
# same_length; the defaults of --mode evaluate) from the newest checkpoint in MODEL_DIR.
#   bash scripts/evaluate.sh [amp|tf32|fp32] [extra main.py flags, e.g. --eval_split valid]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PRECISION=${1:-amp}
shift $(( $# < 1 ? $# : 1 ))
exec bash "$here/../scripts/launch.sh" "$here/main.py" "$PRECISION" 1 noxla --mode evaluate \
  --data_dir "${DATA_DIR:-/data/wikitext-103-prepared}" \
  --model_dir "${MODEL_DIR:-/results/checkpoints}" --results_dir "${RESULTS_DIR:-/results}" "$@"
