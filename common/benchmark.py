"""Throughput and latency statistics for the benchmark modes (warm-up steps already excluded)."""
from __future__ import annotations

import statistics
from typing import Callable, Mapping, Sequence

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


def mfu_rows(rates: Mapping[tuple, Sequence[float]], flops_per_item: Mapping[str, float],
             ceilings: Mapping[str, float], digits: int = 2) -> list[str]:
    """Markdown rows "| mode | precision | median rate | rounds | MFU | speed-up vs fp32 |" of
    the benchmark scripts: ``rates[(mode, precision)]`` are the rounds' items/s,
    ``flops_per_item[mode]`` the model FLOPs per item (3x forward for training) and
    ``ceilings[precision]`` the matmul FLOP/s measured in the same run."""
    rows = []
    for (mode, precision), r in rates.items():
        med, base = statistics.median(r), statistics.median(rates[(mode, "fp32")])
        rows.append(f"| {mode.split('_')[0]} | {precision} | {med:.{digits}f} | "
                    f"{', '.join(f'{v:.{digits}f}' for v in r)} | "
                    f"{flops_per_item[mode] * med / ceilings[precision]:.0%} | {med / base:.2f}x |")
    return rows


def alternating_rounds(rounds: int, modes: Sequence[str], precisions: Mapping[str, object],
                       one: Callable[[str, str], float],
                       ceiling: Callable[[object], float]) -> tuple[dict, dict]:
    """(rates[(mode, precision)], ceilings[precision]) of the benchmark scripts. Each round runs
    every mode and precision once, so drift on a noisy machine hits all alike, and measures the
    matmul ceiling of each precision's dtype (``precisions[name]``) again; the highest ceiling
    seen is kept, so that a slow moment while measuring it cannot inflate MFU."""
    rates = {(m, p): [] for m in modes for p in precisions}
    ceilings = {p: 0.0 for p in precisions}
    for _ in range(rounds):
        for p, dtype in precisions.items():
            ceilings[p] = max(ceilings[p], ceiling(dtype))
        for mode, precision in rates:
            rates[(mode, precision)].append(one(mode, precision))
    return rates, ceilings
