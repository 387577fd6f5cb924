#!/usr/bin/env python
"""SSD320 learns to detect under FP32 and AMP alike.

A generated COCO-layout dataset (ssd/shapes.py: four classes of shapes of varied size,
position and colour on varied backgrounds; 600 train and 100 held-out images) is prepared with
prepare_dataset.py, then SSD with the tiny ResNet trunk is trained at 128x128 under float32 and
under AMP (bfloat16 on a CPU) from each of several seeds, evaluating COCO AP on the held-out
images after every epoch. Prints the AP50 curves. One seed gives both precisions the same initial
weights and data order, but their rounding differs from the first step, and a detector's AP after
a short schedule depends on its trajectory: the spread over seeds is the yardstick for a
difference between precisions.

    python ssd320/scripts/learning_check.py --steps 1800 --seeds 1,2,3 \
        --results_dir results/learning/ssd320

With --results_dir the runs are kept (DIR/fp32-1, DIR/amp-1, ...: each run's log.json,
TensorBoard scalars and checkpoints) for ``python -m benchtools.report``.

With --float32_parts, the AMP runs keep those parts of the network in float32 (main.py's
--float32_parts: trunk, fpn, towers, heads; '' for none) and are named after them
(DIR/amp+heads-1, DIR/amp+none-1): what each part's precision does to AMP's accuracy, against
FP32's runs of the same seeds. --precisions amp runs AMP only (the FP32 runs kept from before).

    python ssd320/scripts/learning_check.py --steps 1800 --seeds 1,2,3 --precisions amp \
        --float32_parts fpn,heads --results_dir results/learning/ssd320

With --backbone_checkpoint, it compares starts instead of precisions (FP32): SSD with the full
ResNet-50 v1.5 trunk (--arch resnet50 --trunk resnet_v1.5) from that ResNet-50 checkpoint
against the same from random weights, the same steps and seeds (DIR/scratch-1,
DIR/pretrained-1, ...): what NVIDIA's recipe gains by starting from an ImageNet classifier,
here from the digits learning check's ResNet-50 (resnet50v1.5/scripts/learning_check.py).

    python ssd320/scripts/learning_check.py --steps 240 --seeds 1,2,3 \
        --backbone_checkpoint results/learning/resnet50v1.5/fp32-1/checkpoints \
        --results_dir results/learning/ssd320-pretrained
"""
import argparse
import os
import runpy
import statistics
import tempfile

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

_here = os.path.dirname(os.path.abspath(__file__))
_model_dir = os.path.dirname(_here)

from common import main_py  # noqa: E402
from common.runtime import dllogger  # noqa: E402
from common.tools import named_precisions as precisions  # noqa: E402
from ssd import shapes  # noqa: E402
from ssd.config import LOG_NAMES  # noqa: E402

AP, AP50, AP75 = (LOG_NAMES.metric(k) for k in ("AP", "AP50", "AP75"))

PRECISIONS = {p: precisions.precision_flags(p) for p in ("fp32", "amp")}  # the tools' table
RECIPE = ["--preset", "shapes"]  # ssd/config.py: a curve (an evaluation every epoch)


def starts(backbone: str) -> dict:
    """The two starts --backbone_checkpoint compares: main.py flags by name. At 96 pixels: the
    full ResNet-50 trunk with its 256-wide FPN and towers trains at about 5 images/s on 2 CPU
    cores, three times as fast as at 128."""
    trunk = ["--arch", "resnet50", "--trunk", "resnet_v1.5", "--image_size", "96"]
    return {"scratch": trunk, "pretrained": [*trunk, "--backbone_checkpoint", backbone]}


def train(records: str, results: str, precision: str, steps: int, seed: int,
          flags=()) -> dict:
    """One run of main.py, the command line a user would type; results read from its log."""
    records = main_py.run_main_py(
        os.path.join(_model_dir, "main.py"),
        ["--mode", "train_and_evaluate", *RECIPE, "--iter_unit", "batch", "--num_iter",
         str(steps), "--seed", str(seed), "--data_dir", records, *PRECISIONS[precision],
         *flags],
        main_py.fresh_results_dir(results))
    evals = [r for r in dllogger.step_logs(records) if AP50 in r["data"]]
    return {"summary": dllogger.last_summary(records),
            "curve": [(r["step"][1], r["data"][AP50]) for r in evals]}


def amp_name(float32_parts) -> str:
    """The AMP runs' name: amp (main.py's default parts), amp+heads, amp+fpn,heads, amp+none."""
    if float32_parts is None:
        return "amp"
    return "amp+" + (",".join(float32_parts) or "none")


def run(steps: int = 1800, seeds=(1, 2, 3), workdir: str | None = None,
        backbone: str | None = None, precisions=tuple(PRECISIONS), float32_parts=None) -> dict:
    """Every precision from every seed: {"fp32": {seed: run}, "amp": {...}}, the AMP runs with
    ``float32_parts`` in float32 where given (``amp_name``); with ``backbone`` every start
    (``starts``) in FP32 instead: {"scratch": ..., "pretrained": ...}. The runs are kept under
    ``workdir`` (NAME-SEED) when it is given (the data is not)."""
    parts_flags = (() if float32_parts is None
                   else ("--float32_parts", ",".join(float32_parts)))
    configs = ({name: ("fp32", flags) for name, flags in starts(backbone).items()} if backbone
               else {(amp_name(float32_parts) if p == "amp" else p):
                     (p, parts_flags if p == "amp" else ()) for p in precisions})
    with tempfile.TemporaryDirectory() as tmp:
        records = shapes.prepare(tmp)
        return {name: {seed: train(records, os.path.join(workdir or tmp, f"{name}-{seed}"),
                                   precision, steps, seed, flags) for seed in seeds}
                for name, (precision, flags) in configs.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1800)
    p.add_argument("--seeds", default="1,2,3", help="comma-separated; each precision is "
                   "trained from each")
    p.add_argument("--results_dir", help="keep the runs here (DIR/fp32-1, DIR/amp-1, ...)")
    p.add_argument("--backbone_checkpoint", help="compare SSD with the full v1.5 trunk from "
                   "this resnet50v1.5 checkpoint against from scratch, in FP32")
    p.add_argument("--precisions", default="fp32,amp", help="which of fp32, amp to run")
    p.add_argument("--float32_parts", help="the AMP runs keep these parts in float32 (any of "
                   "trunk, fpn, towers, heads; '' for none; default: main.py's)")
    args = p.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    precisions = tuple(x for x in args.precisions.split(",") if x)
    if not precisions or set(precisions) - set(PRECISIONS):
        p.error(f"--precisions takes any of {', '.join(PRECISIONS)}")
    parts = (None if args.float32_parts is None
             else tuple(x for x in args.float32_parts.split(",") if x))
    print(report(run(args.steps, seeds, args.results_dir, args.backbone_checkpoint, precisions,
                     parts)))


def median_ap50(runs: dict) -> float:
    """A precision's median final AP50 over its seeds."""
    return float(statistics.median(r["summary"][AP50] for r in runs.values()))


def report(results: dict) -> str:
    """The README's AP50 table (about every 185 steps), each run's final figures and each
    precision's median of ``run``'s results."""
    cols = [(p, seed) for p, by_seed in results.items() for seed in by_seed]
    lines = ["| step | " + " | ".join(f"{p} seed {seed} AP50" for p, seed in cols) + " |",
             "|---|" + "---|" * len(cols)]
    curves = [dict(results[p][seed]["curve"]) for p, seed in cols]
    for step in sorted(curves[0]):
        if step % 185 < 37 or step == max(curves[0]):
            lines.append(f"| {step} | "
                         + " | ".join(f"{c.get(step, float('nan')):.3f}" for c in curves) + " |")
    for p, seed in cols:
        s = results[p][seed]["summary"]
        lines.append(f"{p} seed {seed}: AP {s[AP]:.3f}, AP50 {s[AP50]:.3f}, "
                     f"AP75 {s[AP75]:.3f}, train {s[LOG_NAMES.train_throughput]:.0f} images/s")
    for p, by_seed in results.items():
        lines.append(f"{p}: median final AP50 {median_ap50(by_seed):.3f} over seeds "
                     f"{', '.join(map(str, by_seed))}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
