#!/usr/bin/env bash
# `make demo-ssd`: SSD320 (tiny trunk, 128x128) trained and evaluated on a generated detection
# dataset in COCO's layout (ssd/shapes.py: 600 train and 100 held-out images, nothing to
# download), prepared by this repository's prepare_dataset.py; then predict draws the
# detections of 8 held-out images into DEMO_DIR/results/predictions/*.png.
#   DEMO_DIR=... STEPS=... bash ssd320/scripts/demo.sh [extra main.py flags]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
DEMO_DIR=${DEMO_DIR:-$(pwd)/demo_data/ssd}
STEPS=${STEPS:-1200}

"$PY" "$here/ssd/shapes.py" "$DEMO_DIR"  # DEMO_DIR/coco and DEMO_DIR/records, once
rm -rf "$DEMO_DIR/results" "$DEMO_DIR/to_predict"  # a fresh run (a checkpoint would be resumed)
common=(--preset shapes --data_dir "$DEMO_DIR/records" --results_dir "$DEMO_DIR/results")
"$PY" "$here/main.py" --mode train_and_evaluate "${common[@]}" --iter_unit batch \
  --num_iter "$STEPS" --display_every 100 --noeval_at_epoch_end "$@"
mkdir -p "$DEMO_DIR/to_predict"
cp $(ls "$DEMO_DIR/coco/val2017/"*.jpg | head -8) "$DEMO_DIR/to_predict/"
exec "$PY" "$here/main.py" --mode predict "${common[@]}" --to_predict "$DEMO_DIR/to_predict" \
  --display_every 100
