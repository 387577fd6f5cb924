"""Runs a model's benchmark mode over batch sizes and precisions and prints one table.

    python -m benchtools.sweep resnet50v1.5/main.py --mode training_benchmark \
        --batch_sizes 64,128,256 --precisions fp32,tf32,amp --xla both --gpus 1 \
        -- --iter_unit batch --num_iter 200 --warmup_steps 50

Each configuration is a fresh process (mpirun when --gpus > 1) whose DLLogger summary is read
back, so every figure comes from the same code path as a normal run. Speed-ups are against FP32
at the same batch size and XLA setting, measured in this same sweep.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys

from benchtools import failure
from common import presets
from common.dllogger import read_records

LAUNCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "launch.sh")



def _summary(results_dir: str) -> dict:
    path = os.path.join(results_dir, "log.json")
    finals = [r for r in read_records(path) if r.get("step") == []] if os.path.exists(path) else []
    return finals[-1]["data"] if finals else {}


def run_one(main_py, mode, batch, precision, xla, gpus, results_dir, extra) -> dict:
    # Through the launchers' own script: the precision presets, and mpirun with each rank bound
    # to its GPU's NUMA node (scripts/bind.sh) when there are several GPUs.
    cmd = ["bash", LAUNCH, os.path.abspath(main_py), precision, str(gpus),
           "xla" if xla else "noxla", "--mode", mode, "--batch_size", str(batch),
           "--results_dir", results_dir, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, "LAUNCHER": "mpirun"})
    row = {"precision": precision, "xla": xla, "batch_size": batch, "gpus": gpus}
    if proc.returncode != 0:
        return {**row, "error": failure(proc)}
    return {**_summary(results_dir), **row}  # the sweep's labels win over the summary's


def table(rows, unit: str) -> str:
    key = f"throughput_{unit}_per_s"
    base = {(r["batch_size"], r["xla"]): r.get(key) for r in rows if r["precision"] == "fp32"}
    out = [f"| precision | XLA | batch/GPU | GPUs | {unit}/s | vs FP32 | latency p50 ms | "
           "p99 ms |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['precision']} | {r['xla']} | {r['batch_size']} | {r['gpus']} | "
                       f"failed: {r['error']} | | | |")
            continue
        b = base.get((r["batch_size"], r["xla"]))
        speedup = f"{r[key] / b:.2f}x" if b else "-"
        out.append(f"| {r['precision']} | {'on' if r['xla'] else 'off'} | {r['batch_size']} | "
                   f"{r['gpus']} | {r[key]:.1f} | {speedup} | {r['latency_p50_ms']:.1f} | "
                   f"{r['latency_p99_ms']:.1f} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("main_py")
    p.add_argument("--mode", default="training_benchmark",
                   choices=("training_benchmark", "inference_benchmark"))
    p.add_argument("--batch_sizes", default="32")
    p.add_argument("--precisions", default="fp32,amp")
    p.add_argument("--xla", default="off", choices=("off", "on", "both"))
    p.add_argument("--gpus", type=int, default=1)
    p.add_argument("--unit", default="images", help="the throughput unit of the model")
    p.add_argument("--results_dir", default="./results/sweep")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = p.parse_args(argv[:split]), argv[split + 1:]  # after --: flags for every run
    precisions = args.precisions.split(",")
    unknown = set(precisions) - set(presets.PRECISION_FLAGS)
    if unknown:
        p.error(f"unknown precision {sorted(unknown)[0]}: choose from fp32, tf32, amp")
    xlas = {"off": [False], "on": [True], "both": [False, True]}[args.xla]
    rows = []
    for batch, xla, precision in itertools.product(
            [int(b) for b in args.batch_sizes.split(",")], xlas, precisions):
        name = f"{precision}{'_xla' if xla else ''}_bs{batch}_gpu{args.gpus}"
        print(f"sweep: {name} ...", flush=True)
        rows.append(run_one(args.main_py, args.mode, batch, precision, xla, args.gpus,
                            os.path.join(args.results_dir, name), extra))
    os.makedirs(args.results_dir, exist_ok=True)
    with open(os.path.join(args.results_dir, "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(table(rows, args.unit))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
