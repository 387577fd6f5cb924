#!/usr/bin/env python
"""SSD320 training and inference throughput on this machine, FP32 and AMP side by side, with
MFU: model FLOP/s (3x the forward FLOPs for training) over the matmul ceiling of the compute
dtype (float32, or bfloat16 for AMP on a CPU) measured in the same process. Rounds alternate
precisions, so drift on a noisy machine hits both alike; the median round is reported.

    python ssd320/scripts/benchmark.py --batch_size 8 --steps 8 --warmup 2 --rounds 2
"""
import argparse
import os
import runpy
import tempfile

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

from common.runtime import quiet_start  # noqa: E402

with quiet_start.filtered_stderr():  # TensorFlow's start-up lines, as main.py's
    import tensorflow as tf

from common import runner  # noqa: E402
from common.tools import named_precisions as precisions  # noqa: E402
from common.tools.mfu import forward_flops, matmul_ceiling  # noqa: E402
from common.tools.rounds import alternating_rounds, mfu_rows  # noqa: E402
from ssd.model import build_ssd  # noqa: E402
from ssd.task import SSDTask  # noqa: E402

# The precisions every tool shares (tools/named_precisions.py), and the type their matmuls run in
# here.
PRECISIONS = {p: (precisions.precision_flags(p),
                  tf.as_dtype(precisions.compute_dtype(p, gpu=False))) for p in ("fp32", "amp")}


def one(mode, precision, args) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        s = runner.run(SSDTask, ["main.py", "--mode", mode, "--image_size", str(args.image_size),
                                 "--batch_size", str(args.batch_size), "--iter_unit", "batch",
                                 "--num_iter", str(args.steps + args.warmup), "--warmup_steps",
                                 str(args.warmup), "--display_every", "1000", "--results_dir",
                                 tmp, *PRECISIONS[precision][0]])
    names = SSDTask.config.LOG_NAMES
    return s[names.train_throughput if mode == "training_benchmark" else names.infer_throughput]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image_size", type=int, default=320)
    p.add_argument("--batch_size", type=int, default=8)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    flops = forward_flops(build_ssd("resnet50", 90, args.image_size))
    rates, ceilings = alternating_rounds(
        args.rounds, ("training_benchmark", "inference_benchmark"),
        {name: dtype for name, (_, dtype) in PRECISIONS.items()},
        lambda mode, precision: one(mode, precision, args), matmul_ceiling)
    print(f"\nforward GFLOP/image at {args.image_size}: {flops / 1e9:.1f}; matmul ceilings: "
          + ", ".join(f"{p} {c / 1e9:.0f} GFLOP/s" for p, c in ceilings.items()))
    print(f"| mode (batch {args.batch_size}) | precision | images/s (median of {args.rounds}) "
          "| rounds | MFU | speed-up vs FP32 |")
    print("|---|---|---|---|---|---|")
    print("\n".join(mfu_rows(rates, {"training_benchmark": 3 * flops,
                                     "inference_benchmark": flops}, ceilings)))


if __name__ == "__main__":
    main()
