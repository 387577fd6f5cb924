"""Learning-rate schedules: linear warm-up, then cosine decay to zero or step decay."""
from __future__ import annotations

import keras
from keras import ops


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """``peak * (step + 1) / warmup_steps`` for the first steps, then ``after(step - warmup)``."""

    def __init__(self, peak, warmup_steps, after):
        self.peak, self.warmup_steps, self.after = peak, warmup_steps, after

    def __call__(self, step):
        step = ops.cast(step, "float32")
        if not self.warmup_steps:
            return self.after(step)
        warm = self.peak * (step + 1.0) / self.warmup_steps
        return ops.where(step < self.warmup_steps, warm,
                         self.after(ops.maximum(step - self.warmup_steps, 0.0)))

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "after": keras.optimizers.schedules.serialize(self.after)}


def build_schedule(kind: str, peak: float, total_steps: int, warmup_steps: int = 0):
    decay_steps = max(total_steps - warmup_steps, 1)
    if kind == "cosine":
        after = keras.optimizers.schedules.CosineDecay(peak, decay_steps, alpha=0.0)
    elif kind == "step":
        bounds = [int(decay_steps * r) for r in (1 / 3, 2 / 3, 8 / 9)]
        after = keras.optimizers.schedules.PiecewiseConstantDecay(
            bounds, [peak, peak * 0.1, peak * 0.01, peak * 0.001])
    else:
        raise ValueError(f"unknown schedule {kind!r}")
    return WarmupSchedule(peak, warmup_steps, after)
