#!/usr/bin/env python
"""ResNet-50 v1.5 for ImageNet classification, with AMP, TF32, XLA, Horovod and DALI.

    python main.py --mode train_and_evaluate --data_dir /data/tfrecords --amp --xla
    python main.py --mode training_benchmark --iter_unit batch --num_iter 200 --amp
    mpirun -np 8 python main.py --mode train_and_evaluate --data_dir ... --dali --amp

See README.md (ResNet-50 v1.5) for the flags and the recipes.
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

from common.runner import main  # noqa: E402
from rn50.task import ResNetTask  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(ResNetTask))
