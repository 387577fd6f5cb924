"""``python -m common.ranks``, under any launcher: what each rank sees (its rank, local rank,
CUDA_VISIBLE_DEVICES, the device it computes on and DALI's device id), one line a rank, without
TensorFlow's start-up lines (``common/runtime/quiet_start.py``): the first thing to run on a new
allocation (``scripts/gpu_smoke.sh``'s ranks stage)."""
from common.runtime import quiet_start

if __name__ == "__main__":
    with quiet_start.filtered_stderr():
        from common.runtime import distributed
        rank = distributed.init()
    print(distributed.describe_rank(rank), flush=True)
