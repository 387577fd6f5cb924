#!/usr/bin/env python
"""Turns an ImageNet-style folder into sharded TFRecords and DALI index files.

    python prepare_dataset.py /data/imagenet /data/imagenet-tfrecords
    python prepare_dataset.py /data/small /data/small-tfrecords --train_shards 8 --val_shards 2
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

from rn50.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
