#!/usr/bin/env python
"""SSD320 v1.2 (ResNet-50 FPN, weight-shared box predictor, focal loss) for COCO detection,
with AMP, TF32, XLA, Horovod and DALI.

    python main.py --mode train_and_evaluate --data_dir /data/coco-tfrecords --amp
    python main.py --mode training_benchmark --iter_unit batch --num_iter 200 --amp
    mpirun -np 8 python main.py --mode train_and_evaluate --data_dir ... --dali --amp

See README.md (SSD320 v1.2) for the flags and the recipes.
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_root = os.path.dirname(_here)
sys.path[:0] = [_here, _root, os.path.join(_root, "resnet50v1.5")]  # ssd/, common/, rn50/

from common import versions  # noqa: E402

versions.require(os.path.basename(__file__))  # one line, exit 2, on a stack it cannot use

from common.runner import main  # noqa: E402
from ssd.task import SSDTask  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(SSDTask))
