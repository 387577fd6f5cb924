"""Throughput and latency statistics of the benchmark modes, from timed windows.

The benchmark loops wait for the device only at sync points (every ``--display_every`` steps,
the end of the warm-up, the last step), as training does, so what is timed is a window: the wall
time of the steps dispatched between two sync points. Latency is each window's mean step time,
counted once per step of the window: with ``--display_every 1`` every step is its own window and
the percentiles are those of single steps.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def from_windows(windows: Sequence[tuple[float, int]], items_per_step: int, unit: str) -> dict:
    """``windows``: (seconds, steps) of each timed window, warm-up excluded."""
    if not windows or sum(n for _, n in windows) == 0:
        raise ValueError("no timed steps: --num_iter must exceed --warmup_steps")
    seconds = np.asarray([s for s, _ in windows], dtype=np.float64)
    steps = np.asarray([n for _, n in windows], dtype=np.int64)
    step_ms = np.repeat(1000.0 * seconds / np.maximum(steps, 1), steps)
    out = {
        f"throughput_{unit}_per_s": items_per_step * steps.sum() / seconds.sum(),
        f"mean_step_throughput_{unit}_per_s": float(np.mean(items_per_step * 1000.0 / step_ms)),
        "timed_steps": int(steps.sum()),
        "timed_seconds": float(seconds.sum()),
        "timed_windows": len(windows),
        "latency_avg_ms": float(step_ms.mean()),
    }
    for p in (50, 90, 95, 99):
        out[f"latency_p{p}_ms"] = float(np.percentile(step_ms, p))
    return out
