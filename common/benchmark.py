"""Throughput and latency statistics for the benchmark modes (warm-up steps already excluded)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def throughput(step_seconds: Sequence[float], items_per_step: int, unit: str) -> dict:
    """Total items over total timed seconds; the mean of per-step rates is reported beside it."""
    t = np.asarray(step_seconds, dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timed steps")
    return {
        f"throughput_{unit}_per_s": items_per_step * t.size / t.sum(),
        f"mean_step_throughput_{unit}_per_s": float(np.mean(items_per_step / t)),
        "timed_steps": int(t.size),
        "timed_seconds": float(t.sum()),
    }


def latency(step_seconds: Sequence[float]) -> dict:
    """Average and tail latency of single steps, in milliseconds."""
    ms = 1000.0 * np.asarray(step_seconds, dtype=np.float64)
    if ms.size == 0:
        raise ValueError("no timed steps")
    out = {"latency_avg_ms": float(ms.mean())}
    for p in (50, 90, 95, 99):
        out[f"latency_p{p}_ms"] = float(np.percentile(ms, p))
    return out
