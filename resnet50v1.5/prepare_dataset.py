#!/usr/bin/env python
"""Turns an ImageNet-style folder into sharded TFRecords and DALI index files.

    python prepare_dataset.py /data/imagenet /data/imagenet-tfrecords
    python prepare_dataset.py /data/small /data/small-tfrecords --train_shards 8 --val_shards 2
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]

from common import versions  # noqa: E402

versions.require(os.path.basename(__file__))  # one line, exit 2, on a stack it cannot use

from rn50.prepare import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
