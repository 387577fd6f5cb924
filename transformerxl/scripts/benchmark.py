#!/usr/bin/env python
"""Transformer-XL training and inference throughput on this machine, FP32 and AMP side by side,
with MFU: model FLOP/s (3x the forward FLOPs for training; txl/flops.py) over the matmul ceiling
of the compute dtype (float32, or bfloat16 for AMP on a CPU) measured by this script in every
round, the highest kept. Each measurement is a main.py process of its own; rounds alternate
precisions, so drift on a noisy machine hits both alike; the median round is reported. Data
are synthetic Zipfian tokens over the WikiText-103 vocabulary (see the task), so the adaptive
softmax's tail clusters see a natural share of the tokens.

    python transformerxl/scripts/benchmark.py --batch_size 32 --steps 3 --warmup 1 --rounds 2
"""
import argparse
import gc
import os
import runpy
import tempfile

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

_here = os.path.dirname(os.path.abspath(__file__))
_model_dir = os.path.dirname(_here)

from common.runtime import quiet_start  # noqa: E402

with quiet_start.filtered_stderr():  # TensorFlow's start-up lines, as main.py's
    import keras
    import tensorflow as tf

from common import main_py, models  # noqa: E402
from common.runtime import dllogger  # noqa: E402
from common.tools import named_precisions as precisions  # noqa: E402
from common.tools.mfu import matmul_ceiling  # noqa: E402
from common.tools.rounds import alternating_rounds, mfu_rows  # noqa: E402
from txl.flops import run_flops_per_token  # noqa: E402

# The precisions every tool shares (tools/named_precisions.py), and the type their matmuls run in
# here.
PRECISIONS = {p: (precisions.precision_flags(p),
                  tf.as_dtype(precisions.compute_dtype(p, gpu=False))) for p in ("fp32", "amp")}
MODES = ("training_benchmark", "inference_benchmark")


def flags(mode, precision, args):
    steps, warmup = ((args.steps, args.warmup) if mode == "training_benchmark" else
                     (args.inference_steps, args.inference_warmup))
    return ["main.py", "--mode", mode, "--batch_size", str(args.batch_size), "--eval_batch_size",
            str(args.eval_batch_size), "--iter_unit", "batch", "--num_iter",
            str(steps + warmup), "--warmup_steps", str(warmup),
            "--display_every", "1000", *PRECISIONS[precision][0]]


def one(mode, precision, args) -> float:
    """One run of main.py in its own process (the command a user types; each run starts with
    clean memory, as a run of the full model at 32 rows needs much of this machine's 24 GiB)."""
    with tempfile.TemporaryDirectory() as tmp:
        s = dllogger.last_summary(main_py.run_main_py(
            os.path.join(_model_dir, "main.py"), flags(mode, precision, args)[1:], tmp))
    names = models.log_names("transformerxl")
    rate = s[names.train_throughput if mode == "training_benchmark" else names.infer_throughput]
    print(f"{mode} {precision}: {rate:.1f} tokens/s", flush=True)
    return rate


def flops_per_token(args) -> dict:
    """Forward FLOPs per token in training and in inference (evaluation segments)."""
    out = run_flops_per_token(flags("training_benchmark", "fp32", args))
    keras.backend.clear_session()  # the children need the memory
    gc.collect()
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch_size", type=int, default=32, help="training rows of 192 tokens "
                   "(32: the base recipe's rows per GPU on 8 GPUs)")
    p.add_argument("--eval_batch_size", type=int, default=16, help="inference rows (64 tokens, "
                   "640 memory)")
    p.add_argument("--steps", type=int, default=5, help="training steps measured")
    p.add_argument("--warmup", type=int, default=2, help="training steps before them")
    # An inference step is about a tenth of a training step, and the first few run slower: in
    # AMP on 2 vCPUs, 10-22 of the first three steps' 48 attention score products took 10x their
    # steady time in oneDNN's own log (the same kernel), a few up to the fifth step.
    p.add_argument("--inference_steps", type=int, default=10, help="inference steps measured")
    p.add_argument("--inference_warmup", type=int, default=5, help="inference steps before them")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                   help="main.py modes to measure (default: both)")
    args = p.parse_args()
    fl = flops_per_token(args)
    rates, ceilings = alternating_rounds(
        args.rounds, args.modes, {name: dtype for name, (_, dtype) in PRECISIONS.items()},
        lambda mode, precision: one(mode, precision, args), matmul_ceiling)
    print(f"\nforward MFLOP/token: training {fl['train'] / 1e6:.1f}, inference "
          f"{fl['infer'] / 1e6:.1f} (tail cluster shares "
          + ", ".join(f"{x:.3f}" for x in fl["fractions"]) + "); matmul ceilings: "
          + ", ".join(f"{p} {c / 1e9:.0f} GFLOP/s" for p, c in ceilings.items()))
    print(f"| mode | precision | tokens/s (median of {args.rounds}) | rounds | MFU "
          "| speed-up vs FP32 |")
    print("|---|---|---|---|---|---|")
    print("\n".join(mfu_rows(rates, {"training_benchmark": 3 * fl["train"],
                                     "inference_benchmark": fl["infer"]}, ceilings, digits=0)))


if __name__ == "__main__":
    main()
