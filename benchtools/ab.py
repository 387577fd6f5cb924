"""The same main.py command line at two git revisions, side by side in one run: before and after.

    python -m benchtools.ab --before e539cd8 --rounds 3 -- resnet50v1.5/main.py \
        --mode training_benchmark --arch resnet_tiny --image_size 32 --batch_size 32 \
        --iter_unit batch --num_iter 300 --warmup_steps 50

``--before`` (and ``--after``, default: this checkout's files as they are) are checked out as
git worktrees; each measurement is a process of its own whose packages come from its tree
(PYTHONPATH before the editable install), and the rounds alternate before/after so that drift
on a noisy machine hits both alike. Prints the summary's ``--key`` per round, the medians and
their ratio; ``--json`` writes them too.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

from benchtools import failure
from common import models
from common.runtime.dllogger import last_summary, read_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where each package of pyproject.toml lives in a tree (besides the root: common, benchtools).
MODEL_DIRS = tuple(m.directory for m in models.MODELS.values())


def worktree(revision: str, parent: str) -> str:
    """A detached checkout of ``revision`` under ``parent``."""
    path = os.path.join(parent, revision.replace("/", "_"))
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", "--force", path, revision],
                   check=True, capture_output=True, text=True)
    return path


def rate_key(summary: dict, model: str) -> str:
    """The benchmark's throughput in ``summary``: under the model's names (the mode's; the
    summary says which), else the ``throughput_<unit>_per_s`` of revisions before them."""
    names = models.log_names(model)
    key = names.train_throughput if summary.get("mode") == "training_benchmark" else \
        names.infer_throughput
    if key in summary:
        return key
    return next(k for k in summary if k.startswith("throughput_") and k.endswith("_per_s"))


def run(tree: str, main_py: str, args: list[str], results_dir: str) -> dict:
    """One ``python TREE/MAIN_PY ARGS`` with TREE's packages; its DLLogger summary."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [tree, *(os.path.join(tree, d) for d in MODEL_DIRS), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, os.path.join(tree, main_py), *args,
                           "--results_dir", results_dir], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        raise SystemExit(f"{tree}/{main_py} failed: {failure(proc)}")
    return last_summary(read_records(os.path.join(results_dir, "log.json")))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="git revision measured first in each round")
    p.add_argument("--after", default=None, help="git revision (default: this checkout as is)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--key", default=None, help="summary field to compare (default: the "
                   "benchmark mode's throughput, under the model's names)")
    p.add_argument("--json", default=None, help="also write the rounds and medians here")
    p.add_argument("main_py", help="path of main.py relative to the repository root")
    p.add_argument("args", nargs=argparse.REMAINDER, help="main.py's flags (after --)")
    a = p.parse_args(argv)
    args = [x for x in a.args if x != "--"]
    parent, trees = tempfile.mkdtemp(prefix="ab_"), {}
    try:
        trees["before"] = worktree(a.before, parent)
        trees["after"] = worktree(a.after, parent) if a.after else ROOT
        values = {name: [] for name in trees}
        key = a.key
        for r in range(1, a.rounds + 1):
            for name, tree in trees.items():
                with tempfile.TemporaryDirectory() as results:
                    summary = run(tree, a.main_py, args, results)
                rate = a.key or rate_key(summary, os.path.basename(os.path.dirname(
                    os.path.join(ROOT, a.main_py))))
                key = key or rate
                values[name].append(float(summary[rate]))
                print(f"round {r} {name}: {rate} {values[name][-1]:.4g}", flush=True)
    finally:
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree],
                               capture_output=True)
        shutil.rmtree(parent, ignore_errors=True)
    med = {name: statistics.median(v) for name, v in values.items()}
    print(f"\n{key}: before ({a.before}) {med['before']:.4g}, after ({a.after or 'this checkout'})"
          f" {med['after']:.4g}: {med['after'] / med['before']:.2f}x (medians of {a.rounds} "
          "alternating rounds)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"key": key, "before": a.before, "after": a.after or "checkout",
                       "rounds": values, "medians": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
