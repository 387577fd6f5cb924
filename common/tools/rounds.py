"""Side-by-side measurement for the benchmark scripts: precisions interleaved round by round, the
matmul ceiling re-measured each round, and the markdown rows of their README tables."""
from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence


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
