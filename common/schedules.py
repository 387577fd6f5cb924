"""Learning-rate schedules shared by the models' recipes."""
from __future__ import annotations

import math

import keras
from keras import ops


class WarmupCosine(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up from ``warmup_start`` to ``peak`` over ``warmup_steps``, then a cosine from
    ``peak`` down to ``final`` at ``total_steps`` (and ``final`` after it).

    SSD320 (TF-OD's ``cosine_decay_with_warmup``): warm-up from 0.43332 x peak, cosine to 0.
    Transformer-XL: warm-up from 0, cosine to 0.1 x peak."""

    def __init__(self, peak: float, warmup_steps: int, total_steps: int,
                 warmup_start: float = 0.0, final: float = 0.0):
        self.peak, self.warmup_steps, self.total_steps = peak, warmup_steps, total_steps
        self.warmup_start, self.final = warmup_start, final

    def __call__(self, step):
        step = ops.cast(step, "float32")
        w, t = float(self.warmup_steps), float(max(self.total_steps, self.warmup_steps + 1))
        warm = self.warmup_start + (self.peak - self.warmup_start) * step / max(w, 1.0)
        progress = ops.clip((step - w) / (t - w), 0.0, 1.0)
        cosine = self.final + 0.5 * (self.peak - self.final) * (1 + ops.cos(math.pi * progress))
        return ops.where(step < w, warm, cosine)

    def get_config(self):
        return {"peak": self.peak, "warmup_steps": self.warmup_steps,
                "total_steps": self.total_steps, "warmup_start": self.warmup_start,
                "final": self.final}
