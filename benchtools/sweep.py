"""Runs a model's benchmark mode over batch sizes and precisions and prints one table.

    python -m benchtools.sweep resnet50v1.5/main.py --mode training_benchmark \
        --batch_sizes 64,128,256 --precisions fp32,tf32,amp --xla both --gpus 1 \
        -- --iter_unit batch --num_iter 200 --warmup_steps 50

Each configuration is a fresh process (mpirun when --gpus > 1) whose DLLogger summary is read
back, so every figure comes from the same code path as a normal run. With ``--rounds N`` every
configuration runs N times, the configurations alternating within each round (a machine's
drift falls on all of them alike); the table gives each one's median and range, and
``benchtools.report`` draws the median with the range as a whisker. Speed-ups are against FP32
at the same batch size and XLA setting, measured in this same sweep. The table names the device
the runs recorded (a CPU's batch is per process, a GPU's per GPU).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys

from benchtools import failure
from common import models
from common.runtime.dllogger import read_records
from common.tools.named_precisions import PRECISION_FLAGS

LAUNCH = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts",
                      "launch.sh")



def _summary(results_dir: str) -> dict:
    """The run's summary, with the machine and model its PARAMETER record names."""
    path = os.path.join(results_dir, "log.json")
    records = read_records(path) if os.path.exists(path) else []
    finals = [r for r in records if r.get("step") == []]
    params = next((r["data"] for r in records if r.get("step") == "PARAMETER"), {})
    return {**(finals[-1]["data"] if finals else {}), "machine": params.get("machine"),
            "model": params.get("model")}


def run_one(main_py, mode, batch, precision, xla, gpus, results_dir, extra) -> dict:
    # Through the launchers' own script: the precisions (tools/named_precisions.py), and mpirun
    # with each rank bound to its GPU's NUMA node (scripts/bind.sh) when there are several GPUs.
    cmd = ["bash", LAUNCH, os.path.abspath(main_py), precision, str(gpus),
           "xla" if xla else "noxla", "--mode", mode, "--batch_size", str(batch),
           "--results_dir", results_dir, *extra]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, "LAUNCHER": "mpirun"})
    row = {"precision": precision, "xla": xla, "batch_size": batch, "gpus": gpus}
    if proc.returncode != 0:
        return {**row, "error": failure(proc)}
    return {**_summary(results_dir), **row}  # the sweep's labels win over the summary's


def table(rows, mode: str) -> str:
    """One line per configuration: the median of its rounds, their range, the speed-up of the
    medians against FP32, and the medians of the latencies (mean, p90, p95, p99), under the
    model's names (``common/runtime/log_names.py``)."""
    names = models.log_names(next((r["model"] for r in rows if r.get("model")), ""))
    phase = "train" if mode == "training_benchmark" else "eval"
    key = names.train_throughput if phase == "train" else names.infer_throughput
    latencies = [names.latency(phase, s) for s in ("avg", 90, 95, 99)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["precision"], r["xla"], r["batch_size"], r["gpus"]), []).append(r)
    machines = sorted({r["machine"] for r in rows if r.get("machine")})
    gpu = any("no GPU" not in m for m in machines)
    per = "GPU" if gpu else "process"

    def median(group, k):
        values = [r[k] for r in group if "error" not in r and r.get(k) is not None]
        return statistics.median(values) if values else None

    base = {(b, x): median(g, key) for (p, x, b, _), g in groups.items() if p == "fp32"}
    out = [f"Measured on {'; '.join(machines) or 'an unknown machine'}.", "",
           f"| precision | XLA | batch/{per} | {per}{'s' if gpu else 'es'} | {key} ({names.unit}, "
           "median) | range | rounds | vs FP32 | latency mean ms | p90 ms | p95 ms | p99 ms |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (p, x, b, g), group in groups.items():
        failed = [r for r in group if "error" in r]
        v = median(group, key)
        if v is None:
            out.append(f"| {p} | {'on' if x else 'off'} | {b} | {g} | failed: "
                       f"{failed[0]['error']} | | | | | | | |")
            continue
        values = [r[key] for r in group if "error" not in r]
        spread = f"{min(values):.1f}-{max(values):.1f}" if len(values) > 1 else "-"
        speedup = f"{v / base[(b, x)]:.2f}x" if base.get((b, x)) else "-"
        rounds = f"{len(values)}" + (f" ({len(failed)} failed)" if failed else "")
        lat = [median(group, k) for k in latencies]  # None: not per step (the host waited
        #                                              every --display_every steps)
        latency = " | ".join("-" if v is None else f"{v:.2f}" for v in lat)
        out.append(f"| {p} | {'on' if x else 'off'} | {b} | {g} | {v:.1f} | {spread} | "
                   f"{rounds} | {speedup} | {latency} |")
    if any("latency" in r for r in rows):
        out += ["", "Latency: not per step in a training benchmark unless --display_every 1 "
                "(the host waits for the device every --display_every steps)."]
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
    p.add_argument("--rounds", type=int, default=1, help="runs of every configuration, "
                   "alternating (each in NAME_rK)")
    p.add_argument("--results_dir", default="./results/sweep")
    argv = list(sys.argv[1:] if argv is None else argv)
    split = argv.index("--") if "--" in argv else len(argv)
    args, extra = p.parse_args(argv[:split]), argv[split + 1:]  # after --: flags for every run
    precisions = args.precisions.split(",")
    unknown = set(precisions) - set(PRECISION_FLAGS)
    if unknown:
        p.error(f"unknown precision {sorted(unknown)[0]}: choose from fp32, tf32, amp")
    xlas = {"off": [False], "on": [True], "both": [False, True]}[args.xla]
    rows = []
    configs = list(itertools.product([int(b) for b in args.batch_sizes.split(",")], xlas,
                                     precisions))
    for k in range(1, args.rounds + 1):
        for batch, xla, precision in configs:
            name = (f"{precision}{'_xla' if xla else ''}_bs{batch}_gpu{args.gpus}"
                    + (f"_r{k}" if args.rounds > 1 else ""))
            print(f"sweep: {name} ...", flush=True)
            rows.append(run_one(args.main_py, args.mode, batch, precision, xla, args.gpus,
                                os.path.join(args.results_dir, name), extra))
    os.makedirs(args.results_dir, exist_ok=True)
    with open(os.path.join(args.results_dir, "sweep.json"), "w") as f:
        json.dump(rows, f, indent=1)
    print(table(rows, args.mode))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
