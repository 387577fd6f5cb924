#!/usr/bin/env python
"""Turns a dataset in COCO's layout into TFRecords, DALI index files and a label map.

    python prepare_dataset.py /data/coco /data/coco-tfrecords
    python prepare_dataset.py /data/shapes /data/shapes-tfrecords --train_shards 4 --val_shards 1
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then ssd.prepare:main.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "ssd.prepare:main"))
