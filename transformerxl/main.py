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
from txl.task import TransformerXLTask  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(TransformerXLTask))
