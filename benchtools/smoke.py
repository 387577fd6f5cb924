"""The table at the end of ``scripts/gpu_smoke.sh``: each stage, passed or failed, with the
figures that say whether it went right, as Markdown (``table.md``, to paste into an issue) and
JSON (``table.json``).

    python -m benchtools.smoke results/gpu_smoke

A stage is a directory holding ``exit_code`` (the script writes it), its ``stdout`` and
``stderr``, and its figures: a tool's ``figures.json`` (its ``summary`` line: the parity and
DALI comparisons, Horovod's allreduce), nccl-tests' average bus bandwidth from its stdout, or
for a main.py stage ``run/log.json``, whose summary gives throughput, processes, peak GPU
memory, the profiled tensor-core share, evaluation time and AP. A skipped stage holds
``skipped``, its reason.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

from common import models
from common.runtime.dllogger import last_summary, read_records


def _figures(model: str) -> tuple:
    """(summary key, how the table shows it), under the model's names
    (common/runtime/log_names.py)."""
    n = models.log_names(model)
    unit = n.unit.replace("images/s", "img/s").replace("tokens/s", "tok/s")
    rates = dict.fromkeys((n.train_throughput, n.infer_throughput))
    return (("world_size", "{} proc"), *((k, "{:.0f} " + unit) for k in rates),
            ("final_step", "step {}"), ("start_step", "from step {}"),
            ("skipped_steps", "{} skipped"),
            ("gpu_memory_peak_mib", "peak {} MiB"),
            ("tensor_core_share", "tensor cores {:.0%} of matmul/conv"),
            ("tensor_core_missed", "eligible, not on tensor cores: {}"),
            ("matmul_conv_16bit_share", "16-bit {:.0%}"),
            (n.eval_throughput, "eval {:.1f} " + unit),
            (n.metric("AP"), "AP {:.3f}"),
            *((n.latency("eval", s), f"{lbl} {{:.1f}} ms") for s, lbl in
              (("avg", "mean"), (90, "p90"), (95, "p95"), (99, "p99"))),
            ("export", "exported"))


def stage_row(path: str) -> tuple[str, str, str]:
    """(stage, PASS/FAIL/not run, figures or the error's last line)."""
    name = os.path.basename(path)
    if os.path.exists(os.path.join(path, "skipped")):
        with open(os.path.join(path, "skipped")) as f:
            return name, "skipped", f.read().strip()
    try:
        with open(os.path.join(path, "exit_code")) as f:
            code = int(f.read().strip())
    except (OSError, ValueError):
        return name, "not run", ""
    result = "PASS" if code == 0 else f"FAIL ({code})"
    try:  # a tool's stage: its summary, also when it failed (which comparison, by how much)
        with open(os.path.join(path, "figures.json")) as f:
            return name, result, json.load(f).get("summary", "")
    except (OSError, ValueError):
        pass
    if code != 0:
        lines = [ln for ln in _read(os.path.join(path, "stderr")).splitlines() if ln.strip()]
        return name, result, lines[-1] if lines else ""
    stdout = _read(os.path.join(path, "stdout"))
    busbw = re.search(r"Avg bus bandwidth\s*:\s*([0-9.]+)", stdout)
    if busbw:  # nccl-tests' all_reduce_perf
        return name, "PASS", f"busbw {float(busbw.group(1)):.1f} GB/s (all_reduce_perf, average)"
    log = os.path.join(path, "run", "log.json")
    if not os.path.exists(log):  # a stage that prints (the rank report)
        lines = [ln for ln in stdout.splitlines() if ln.startswith("rank ")]
        return name, "PASS", f"{len(lines)} rank(s): " + " | ".join(sorted(lines))
    records = read_records(log)
    model = next((r["data"].get("model") for r in records if r.get("step") == "PARAMETER"), "")
    summary = last_summary(records) or {}
    figures = [fmt.format(summary[k]) for k, fmt in _figures(model) if summary.get(k) is not None]
    return name, "PASS", ", ".join(figures)


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def rows(smoke_dir: str) -> list[tuple[str, str, str]]:
    return [stage_row(os.path.join(smoke_dir, d)) for d in sorted(os.listdir(smoke_dir))
            if os.path.isdir(os.path.join(smoke_dir, d)) and d != "data"]


def table(rows: list[tuple[str, str, str]]) -> str:
    out = ["| stage | result | figures |", "|---|---|---|"]
    out += [f"| {name} | {result} | {figures} |" for name, result, figures in rows]
    passed = sum(r[1] == "PASS" for r in rows)
    skipped = sum(r[1] == "skipped" for r in rows)
    out.append(f"\n{passed} of {len(rows) - skipped} stages passed"
               + (f" ({skipped} skipped: not possible on this machine)" if skipped else ""))
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("smoke_dir")
    args = ap.parse_args(argv)
    found = rows(args.smoke_dir)
    text = table(found)
    print(text)
    with open(os.path.join(args.smoke_dir, "table.md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.smoke_dir, "table.json"), "w") as f:
        json.dump([{"stage": n, "result": r, "figures": fig} for n, r, fig in found], f,
                  indent=1)
    return 1 if any(r.startswith("FAIL") for _, r, _ in found) else 0


if __name__ == "__main__":
    sys.exit(main())
