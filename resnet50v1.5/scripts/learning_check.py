#!/usr/bin/env python
"""ResNet-50 v1.5 learns real images under FP32 and AMP alike.

scikit-learn's 1,797 handwritten digits (no download) are written as an ImageNet-style folder,
prepared with prepare_dataset.py, and the full ResNet-50 is trained at 32x32 under float32 and
under AMP (bfloat16 on a CPU) from each of several seeds (one seed gives both precisions the same
initial weights and data order). Prints top-1 per epoch and the per-epoch mean training loss of
every run: the spread over seeds is the yardstick for the difference between precisions.

    python resnet50v1.5/scripts/learning_check.py --epochs 3 --seeds 1,2,3 \
        --results_dir results/learning/resnet50v1.5

With --results_dir the runs are kept (DIR/fp32-1, DIR/amp-1, ...) for
``python -m benchtools.report``.
"""
import argparse
import os
import runpy
import tempfile

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

_here = os.path.dirname(os.path.abspath(__file__))
_model_dir = os.path.dirname(_here)

import numpy as np  # noqa: E402

from common import main_py, runner  # noqa: E402
from common.runtime import dllogger  # noqa: E402
from common.tools import named_precisions as precisions  # noqa: E402
from rn50 import config, digits  # noqa: E402
from rn50.task import ResNetTask  # noqa: E402

PRECISIONS = {p: precisions.precision_flags(p) for p in ("fp32", "amp")}  # the tools' table


def train(records: str, results: str, precision: str, epochs: int, seed: int) -> dict:
    summary = runner.run(ResNetTask, [
        "main.py", "--mode", "train_and_evaluate", "--preset", "digits", "--num_iter",
        str(epochs), "--seed", str(seed), "--data_dir", records,
        "--results_dir", main_py.fresh_results_dir(results),
        "--display_every", "1", *PRECISIONS[precision]])
    records_ = dllogger.read_records(os.path.join(results, "log.json"))
    steps = dllogger.step_logs(records_)
    losses = {}
    loss, top1 = config.LOG_NAMES.loss, config.LOG_NAMES.metric("top1")
    for r in steps:
        if loss in r["data"]:
            losses.setdefault(r["step"][0], []).append(r["data"][loss])
    top1 = [r["data"][top1] for r in steps if top1 in r["data"]]
    return {"summary": summary, "epoch_loss": [float(np.mean(losses[e])) for e in sorted(losses)],
            "epoch_top1": top1}


def run(epochs: int = 3, seeds=(1, 2, 3), workdir: str | None = None) -> dict:
    """Every precision from every seed: {"fp32": {seed: run}, "amp": {...}}; the runs are kept
    under ``workdir`` (PRECISION-SEED) when it is given (the data is not)."""
    with tempfile.TemporaryDirectory() as tmp:
        records = digits.prepare(tmp)
        return {p: {seed: train(records, os.path.join(workdir or tmp, f"{p}-{seed}"), p, epochs,
                                seed) for seed in seeds}
                for p in PRECISIONS}


def report(out: dict) -> str:
    """The README's table of ``run``'s results: a row per run, then each precision's median."""
    runs = [(p, seed, r) for p, by_seed in out.items() for seed, r in by_seed.items()]
    epochs = len(runs[0][2]["epoch_loss"])
    lines = ["| precision | seed | " + " | ".join(f"epoch {e + 1} loss / top-1"
                                                 for e in range(epochs))
             + " | train images/s |", "|---|---|" + "---|" * (epochs + 1)]
    for name, seed, r in runs:
        cells = [f"{loss:.3f} / {t:.1%}" for loss, t in zip(r["epoch_loss"], r["epoch_top1"])]
        lines.append(f"| {name} ({r['summary']['precision']}) | {seed} | " + " | ".join(cells)
                     + f" | {r['summary'][config.LOG_NAMES.train_throughput]:.0f} |")
    for name, by_seed in out.items():
        top1 = [r["epoch_top1"][-1] for r in by_seed.values()]
        lines.append(f"{name}: final top-1 median {np.median(top1):.1%} over seeds "
                     f"{', '.join(map(str, by_seed))} (range {min(top1):.1%} to {max(top1):.1%})")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--seeds", default="1,2,3", help="comma-separated; each precision is "
                   "trained from each")
    p.add_argument("--results_dir", help="keep the runs here (DIR/fp32-1, DIR/amp-1, ...)")
    args = p.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    print(report(run(args.epochs, seeds, args.results_dir)))


if __name__ == "__main__":
    main()
