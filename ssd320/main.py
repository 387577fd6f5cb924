#!/usr/bin/env python
"""SSD320 v1.2 (ResNet-50 FPN, weight-shared box predictor, focal loss) for COCO detection,
with AMP, TF32, XLA, Horovod and DALI.

    python main.py --mode train_and_evaluate --data_dir /data/coco-tfrecords --amp
    python main.py --mode training_benchmark --iter_unit batch --num_iter 200 --amp
    mpirun -np 8 python main.py --mode train_and_evaluate --data_dir ... --dali --amp

See README.md (SSD320 v1.2) for the flags and the recipes.
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then ssd.task:SSDTask.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "ssd.task:SSDTask"))
