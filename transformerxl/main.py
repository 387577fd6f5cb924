#!/usr/bin/env python
"""Transformer-XL base (relative attention with memory, adaptive softmax, LAMB) for
WikiText-103 language modelling, with AMP, TF32, XLA, Horovod and DALI.

    python prepare_dataset.py /data/wikitext-103 /data/wt103
    python main.py --mode train_and_evaluate --data_dir /data/wt103 --batch_size 32 --amp
    python main.py --mode evaluate --data_dir /data/wt103 --model_dir results/checkpoints
    python main.py --mode training_benchmark --iter_unit batch --num_iter 100 --batch_size 16 --amp
    mpirun -np 8 python main.py --mode train_and_evaluate --data_dir /data/wt103 --batch_size 32

See README.md (Transformer-XL base) for the flags and the recipes.
"""
import os
import runpy
import sys

# The start every script shares (common/entry.py): one line when the repository is not
# installed or the stack cannot run it, then txl.task:TransformerXLTask.
ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "common", "entry.py")

if __name__ == "__main__":
    sys.exit(runpy.run_path(ENTRY)["run"](__file__, "txl.task:TransformerXLTask"))
