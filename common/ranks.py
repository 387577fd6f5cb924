"""``python -m common.ranks``, under any launcher: what each rank sees (its rank, local rank,
CUDA_VISIBLE_DEVICES, the device it computes on and DALI's device id), one line a rank, without
TensorFlow's start-up lines (``common/quiet_start.py``): the first thing to run on a new
allocation (``scripts/gpu_smoke.sh``'s ranks stage)."""
from common import quiet_start

if __name__ == "__main__":
    with quiet_start.filtered_stderr():
        from common import distributed
        rank = distributed.init()
    print(distributed.describe_rank(rank), flush=True)
