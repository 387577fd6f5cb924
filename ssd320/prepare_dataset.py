#!/usr/bin/env python
"""Turns a dataset in COCO's layout into TFRecords, DALI index files and a label map.

    python prepare_dataset.py /data/coco /data/coco-tfrecords
    python prepare_dataset.py /data/shapes /data/shapes-tfrecords --train_shards 4 --val_shards 1
"""
import os
import sys

try:
    from common import versions
except ModuleNotFoundError:  # the repository is not installed in this Python
    print(f"{os.path.basename(__file__)}: error: this repository is not installed; run "
          "`bash scripts/install_deps.sh` (or `pip install --no-deps -e .`) at its root",
          file=sys.stderr)
    sys.exit(2)

versions.require(__file__)  # one line, exit 2, on a stack it cannot use

from ssd.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
