"""Runs LinearTask on the real runner under horovodrun/mpirun and saves each rank's result.

    python hvd_worker.py OUT_DIR [main.py flags...]
"""
import os
import sys

import numpy as np
from linear_task import LinearTask

from common import runner

if __name__ == "__main__":
    out = sys.argv[1]
    rank = int(os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"pid{rank}"), "w") as f:
        f.write(str(os.getpid()))
    summary = runner.run(LinearTask, ["hvd_worker.py", "--results_dir", out] + sys.argv[2:])
    kernel, bias = (v.numpy() for v in LinearTask.last_model.weights)
    np.savez(os.path.join(out, f"rank{rank}.npz"), kernel=kernel, bias=bias,
             step=summary["final_step"], world=summary["world_size"])
