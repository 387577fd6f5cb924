#!/usr/bin/env python
"""Turns a dataset in COCO's layout into TFRecords, DALI index files and a label map.

    python prepare_dataset.py /data/coco /data/coco-tfrecords
    python prepare_dataset.py /data/shapes /data/shapes-tfrecords --train_shards 4 --val_shards 1
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
sys.path[:0] = [_here, _root, os.path.join(_root, "resnet50v1.5")]  # ssd/, common/, rn50/

from common import versions  # noqa: E402

versions.require(os.path.basename(__file__))  # one line, exit 2, on a stack it cannot use

from ssd.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
