#!/usr/bin/env python
"""ResNet-50 v1.5 for ImageNet classification, with AMP, TF32, XLA, Horovod and DALI.

    python main.py --mode train_and_evaluate --data_dir /data/tfrecords --amp --xla
    python main.py --mode training_benchmark --iter_unit batch --num_iter 200 --amp
    mpirun -np 8 python main.py --mode train_and_evaluate --data_dir ... --dali --amp

See README.md (ResNet-50 v1.5) for the flags and the recipes.
"""
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_here, os.path.dirname(_here)]  # rn50/ and the repository's common/

from common import versions  # noqa: E402

versions.require(os.path.basename(__file__))  # one line, exit 2, on a stack it cannot use

from common.runner import main  # noqa: E402
from rn50.task import ResNetTask  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(ResNetTask))
