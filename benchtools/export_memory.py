"""The memory an export takes: the resident set of a command's whole process tree (``main.py``
and the converters it starts: tf2onnx, Model Optimizer), sampled from ``/proc`` while it runs,
its peak and each process's own, with the versions of the packages that did the work, as
JSON (docs/tools.md's "The export's memory" quotes it).

    python -m benchtools.export_memory --out results/export-memory.json -- \\
        python resnet50v1.5/main.py --mode train --iter_unit batch --num_iter 1 \\
        --batch_size 8 --results_dir /tmp/rn50 --export_dir /tmp/rn50/export \\
        --export_triton /tmp/rn50/triton

The peak of the tree is the sum of the processes' resident sets at one sample (what a machine
or a container's memory limit must hold), not the sum of each one's own peak; samples every
``--interval`` seconds can miss a peak shorter than that, so each process's own peak is read
from ``/proc/PID/status`` (``VmHWM``, the kernel's high-water mark) as well.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time

PACKAGES = ("tensorflow", "keras", "numpy", "tf2onnx", "onnx", "onnxruntime", "protobuf")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                out += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return out


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += _children(p)
    return found


def _status(pid: int) -> dict | None:
    """VmRSS and VmHWM in bytes and the process's command, or None once it has ended."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None

    def kib(key):
        return int(fields.get(key, "0 kB").split()[0]) * 1024
    return {"rss": kib("VmRSS"), "hwm": kib("VmHWM"), "command": cmd}


def measure(command: list[str], interval: float = 0.05) -> dict:
    """Runs ``command`` and samples its process tree until it exits."""
    start = time.monotonic()
    proc = subprocess.Popen(command)
    peak, peak_at, processes = 0, 0.0, {}
    while proc.poll() is None:
        total = 0
        for pid in _tree(proc.pid):
            s = _status(pid)
            if s is None:
                continue
            total += s["rss"]
            seen = processes.setdefault(pid, {"command": s["command"][:200], "peak_rss": 0,
                                              "hwm": 0})
            seen["peak_rss"] = max(seen["peak_rss"], s["rss"])
            seen["hwm"] = max(seen["hwm"], s["hwm"])
        if total > peak:
            peak, peak_at = total, time.monotonic() - start
        time.sleep(interval)
    return {"command": command, "exit_code": proc.returncode,
            "seconds": round(time.monotonic() - start, 1),
            "tree_peak_rss_gib": round(peak / 2**30, 2),
            "tree_peak_at_s": round(peak_at, 1),
            "processes": sorted(({"command": p["command"],
                                  "peak_rss_gib": round(p["peak_rss"] / 2**30, 2),
                                  "hwm_gib": round(p["hwm"] / 2**30, 2)}
                                 for p in processes.values() if p["hwm"] > 50 << 20),
                                key=lambda p: -p["hwm_gib"])}


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def _machine() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            model = next(ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name"))
    except (OSError, StopIteration):
        model = platform.processor() or "unknown CPU"
    with open("/proc/meminfo") as fh:
        total = int(fh.readline().split()[1]) * 1024
    return f"{model} ({os.cpu_count()} vCPUs, {total / 2**30:.0f} GiB)"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="the JSON written")
    p.add_argument("--interval", type=float, default=0.05, help="seconds between samples")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("give the command after --")
    result = {"date": datetime.date.today().isoformat(), "machine": _machine(),
              "packages": _versions(), **measure(command, args.interval)}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)
        fh.write("\n")
    print(json.dumps({k: result[k] for k in ("exit_code", "seconds", "tree_peak_rss_gib")}))
    for proc in result["processes"]:
        print(f"  {proc['hwm_gib']:6.2f} GiB peak  {proc['command'][:120]}")
    return 0 if result["exit_code"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
