"""Horovod's allreduce timed at message sizes from 1 MiB to 256 MiB, as the training loop calls
it (``hvd.allreduce`` of float32 tensors on this rank's device), with the bandwidths
nccl-tests' ``all_reduce_perf`` prints: ``algbw`` = bytes / time and ``busbw`` = algbw x
2 (n - 1) / n, the figure comparable across rank counts (a ring moves 2 (n - 1) / n of the
data per rank). ``scripts/gpu_smoke.sh`` runs it as the ``nccl`` stage where nccl-tests is not
installed:

    bash scripts/launch.sh benchtools/allreduce.py fp32 8 noxla [--json OUT]

Rank 0 prints one line a size and, with ``--json``, writes them with the largest size's
bus bandwidth as the summary.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from common.runtime import quiet_start

SIZES_MIB = (1, 4, 16, 64, 256)


def bus_bandwidth(algbw: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth of an allreduce: what each link carries in a ring."""
    return algbw * 2 * (ranks - 1) / ranks if ranks > 1 else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--json")
    # scripts/launch.sh adds its precision preset's main.py flags (--no_tf32): not ours to read
    args, _ = ap.parse_known_args(argv)
    with quiet_start.filtered_stderr():
        import tensorflow as tf

        from common.runtime import distributed
        dist = distributed.init()
    if not dist.enabled:
        print("allreduce: error: one process: start it under a launcher with 2 or more ranks "
              "(scripts/launch.sh benchtools/allreduce.py fp32 N noxla)", file=sys.stderr)
        return 2
    import horovod.tensorflow as hvd
    rows = []
    with tf.device(dist.devices.tf_device):
        for mib in SIZES_MIB:
            x = tf.ones([mib * 2**20 // 4], tf.float32)
            for _ in range(args.warmup):
                hvd.allreduce(x, op=hvd.Sum).numpy()
            start = time.perf_counter()
            for _ in range(args.iters):
                out = hvd.allreduce(x, op=hvd.Sum)
            total = float(out[0].numpy())  # waits for the last one
            seconds = (time.perf_counter() - start) / args.iters
            if total != dist.size:
                print(f"allreduce: error: the sum of ones over {dist.size} ranks is {total}",
                      file=sys.stderr)
                return 1
            algbw = mib * 2**20 / seconds / 1e9
            rows.append({"size_mib": mib, "time_ms": seconds * 1e3, "algbw_gb_s": algbw,
                         "busbw_gb_s": bus_bandwidth(algbw, dist.size)})
    if dist.is_chief:
        for r in rows:
            print(f"{r['size_mib']:>4} MiB  {r['time_ms']:8.3f} ms  algbw {r['algbw_gb_s']:7.2f} "
                  f"GB/s  busbw {r['busbw_gb_s']:7.2f} GB/s", flush=True)
        if args.json:
            last = rows[-1]
            with open(args.json, "w") as f:
                json.dump({"ranks": dist.size, "sizes": rows, "summary":
                           f"{dist.size} ranks, busbw {last['busbw_gb_s']:.1f} GB/s at "
                           f"{last['size_mib']} MiB (Horovod allreduce)"}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
