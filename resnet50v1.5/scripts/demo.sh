#!/usr/bin/env bash
# The `make demo` run: ResNet-50 v1.5 trained and evaluated on a small real dataset that needs no
# download (scikit-learn's 1,797 handwritten digits, upscaled to 32x32 and written as an
# ImageNet-style folder), prepared by this repository's own prepare_dataset.py.
# The recipe is main.py's --preset digits (rn50/config.py): digits are small and low-resolution,
# so training crops keep at least half the image and the last batch norm of each block starts at
# zero, which steadies the first epochs.
#   DEMO_DIR=... EPOCHS=... bash resnet50v1.5/scripts/demo.sh [extra main.py flags]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
DEMO_DIR=${DEMO_DIR:-$(pwd)/demo_data}
EPOCHS=${EPOCHS:-3}

"$PY" "$here/rn50/digits.py" "$DEMO_DIR"  # DEMO_DIR/records, once (rn50.digits.prepare)
rm -rf "$DEMO_DIR/results"  # a fresh run each time (an existing checkpoint would be resumed)
exec "$PY" "$here/main.py" --mode train_and_evaluate --preset digits --num_iter "$EPOCHS" \
  --data_dir "$DEMO_DIR/records" --results_dir "$DEMO_DIR/results" --display_every 10 "$@"
