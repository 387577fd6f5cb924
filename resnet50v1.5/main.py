#!/usr/bin/env python
"""ResNet-50 v1.5 for ImageNet classification, with AMP, TF32, XLA, Horovod and DALI.

    python main.py --mode train_and_evaluate --data_dir /data/tfrecords --amp --xla
    python main.py --mode training_benchmark --iter_unit batch --num_iter 200 --amp
    mpirun -np 8 python main.py --mode train_and_evaluate --data_dir ... --dali --amp

See README.md (ResNet-50 v1.5) for the flags and the recipes.
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then rn50.task:ResNetTask.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "rn50.task:ResNetTask"))
