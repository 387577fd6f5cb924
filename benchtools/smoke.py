"""The table at the end of ``scripts/gpu_smoke.sh``: each stage, passed or failed, with the
figures that say whether it went right.

    python -m benchtools.smoke results/gpu_smoke

A stage is a directory holding ``exit_code`` (the script writes it), its ``stdout`` and
``stderr``, and for a main.py stage ``run/log.json``, whose summary gives the figures:
throughput, processes, peak GPU memory, the profiled tensor-core share, evaluation time and AP.
"""
from __future__ import annotations

import argparse
import os
import sys

from common.dllogger import last_summary, read_records

# summary key -> how the table shows it
_FIGURES = (
    ("world_size", "{} proc"),
    ("train_images_per_s", "{:.0f} img/s"), ("train_tokens_per_s", "{:.0f} tok/s"),
    ("throughput_images_per_s", "{:.0f} img/s"), ("throughput_tokens_per_s", "{:.0f} tok/s"),
    ("gpu_memory_peak_mib", "peak {} MiB"),
    ("tensor_core_share", "tensor cores {:.0%} of matmul/conv"),
    ("tensor_core_missed", "eligible, not on tensor cores: {}"),
    ("matmul_conv_16bit_share", "16-bit {:.0%}"),
    ("eval_images_per_s", "eval {:.1f} img/s"), ("eval_AP", "AP {:.3f}"),
    ("latency_p50_ms", "p50 {:.1f} ms"),
)


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
    if code != 0:
        try:
            with open(os.path.join(path, "stderr")) as f:
                lines = [ln for ln in f.read().splitlines() if ln.strip()]
        except OSError:
            lines = []
        return name, f"FAIL ({code})", lines[-1] if lines else ""
    log = os.path.join(path, "run", "log.json")
    if not os.path.exists(log):  # a stage that prints (the rank report)
        with open(os.path.join(path, "stdout")) as f:
            lines = [ln for ln in f.read().splitlines() if ln.startswith("rank ")]
        return name, "PASS", f"{len(lines)} rank(s): " + " | ".join(sorted(lines))
    summary = last_summary(read_records(log)) or {}
    figures = [fmt.format(summary[k]) for k, fmt in _FIGURES if summary.get(k) is not None]
    return name, "PASS", ", ".join(figures)


def table(smoke_dir: str) -> str:
    rows = [stage_row(os.path.join(smoke_dir, d)) for d in sorted(os.listdir(smoke_dir))
            if os.path.isdir(os.path.join(smoke_dir, d)) and d != "data"]
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
    text = table(args.smoke_dir)
    print(text)
    with open(os.path.join(args.smoke_dir, "table.md"), "w") as f:
        f.write(text + "\n")
    return 1 if "| FAIL" in text else 0


if __name__ == "__main__":
    sys.exit(main())
