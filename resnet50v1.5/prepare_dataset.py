#!/usr/bin/env python
"""Turns an ImageNet-style folder into sharded TFRecords and DALI index files.

    python prepare_dataset.py /data/imagenet /data/imagenet-tfrecords
    python prepare_dataset.py /data/small /data/small-tfrecords --train_shards 8 --val_shards 2
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then rn50.prepare:main.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "rn50.prepare:main"))
