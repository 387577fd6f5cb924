"""The learning-rate schedule of every recipe: a linear warm-up, then a decay.

ResNet-50 (NVIDIA's): warm-up to the peak as ``peak * (step + 1) / warmup_steps``, then a
cosine to 0 (or steps of 0.1 at 1/3, 2/3 and 8/9 of the rest). SSD320 (TF-OD's
``cosine_decay_with_warmup``): warm-up from 0.43332 x peak as ``start + (peak - start) * step /
warmup_steps``, then a cosine to 0. Transformer-XL: warm-up from 0, then a cosine to 0.1 x peak.
The decays are Keras' own schedules, counted from the end of the warm-up.
"""
from __future__ import annotations

import keras
from keras import ops


class Warmup(keras.optimizers.schedules.LearningRateSchedule):
    """``warmup_start + (peak - warmup_start) * (step + offset) / warmup_steps`` for the first
    ``warmup_steps`` steps, then ``after(step - warmup_steps)``."""

    def __init__(self, peak: float, warmup_steps: int,
                 after: keras.optimizers.schedules.LearningRateSchedule,
                 warmup_start: float = 0.0, offset: float = 0.0):
        self.peak, self.warmup_steps, self.after = peak, warmup_steps, after
        self.warmup_start, self.offset = warmup_start, offset

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if not self.warmup_steps:
            return self.after(step)
        warm = (self.warmup_start + (self.peak - self.warmup_start)
                * (step + self.offset) / self.warmup_steps)
        return ops.where(step < self.warmup_steps, warm,
                         self.after(ops.maximum(step - self.warmup_steps, 0.0)))

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "after": keras.optimizers.schedules.serialize(self.after),
                "warmup_start": self.warmup_start, "offset": self.offset}


def cosine(peak: float, warmup_steps: int, total_steps: int, final: float = 0.0,
           warmup_start: float = 0.0, offset: float = 0.0) -> Warmup:
    """Warm-up, then a cosine from ``peak`` to ``final`` at ``total_steps`` (and after)."""
    after = keras.optimizers.schedules.CosineDecay(
        peak, max(total_steps - warmup_steps, 1), alpha=final / peak)
    return Warmup(peak, warmup_steps, after, warmup_start, offset)


def steps(peak: float, warmup_steps: int, total_steps: int, offset: float = 0.0) -> Warmup:
    """Warm-up, then the peak divided by 10 at 1/3, 2/3 and 8/9 of the remaining steps."""
    decay_steps = max(total_steps - warmup_steps, 1)
    bounds = [int(decay_steps * r) for r in (1 / 3, 2 / 3, 8 / 9)]
    after = keras.optimizers.schedules.PiecewiseConstantDecay(
        bounds, [peak, peak * 0.1, peak * 0.01, peak * 0.001])
    return Warmup(peak, warmup_steps, after, offset=offset)
