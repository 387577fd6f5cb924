"""Throughput and latency statistics of the benchmark modes, from timed windows.

The benchmark loops wait for the device only at sync points (every ``--display_every`` steps,
the end of the warm-up, the last step), as training does, so what is timed is a window: the wall
time of the steps dispatched between two sync points. Latency is each window's mean step time,
counted once per step of the window: with ``--display_every 1`` every step is its own window and
the percentiles are those of single steps.
"""
from __future__ import annotations

import time
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


class Windows:
    """A benchmark loop's timed windows: the steps dispatched between two host sync points and
    the wall time from the end of one sync point's own work (logging, profiling) to the next
    sync. Windows that start before the end of the warm-up are not timed."""

    def __init__(self, warmup_steps: int):
        self.warmup_steps, self.timed = warmup_steps, []  # timed: (seconds, steps) per window
        self.last = None  # the latest window, timed or not
        self._step, self._start = 0, time.perf_counter()

    def close(self, step: int) -> None:
        """At a sync point, right after the host waited for the device at ``step``."""
        self.last = (time.perf_counter() - self._start, step - self._step)
        if self._step >= self.warmup_steps:
            self.timed.append(self.last)
        self._step = step

    def reopen(self) -> None:
        """After the sync point's own work: the next window starts now."""
        self._start = time.perf_counter()

    def rate(self, items_per_step: int) -> float:
        """Items/s of the latest window."""
        seconds, steps = self.last
        return items_per_step * steps / seconds if seconds > 0 else 0.0

    def summary(self, items_per_step: int, unit: str) -> dict:
        return from_windows(self.timed, items_per_step, unit)
