"""Perplexity as NVIDIA's Transformer-XL evaluation reports it, summable over ranks."""
from __future__ import annotations

import keras
import tensorflow as tf


class PerplexityMetric(keras.metrics.Metric):
    """exp(mean NLL). Its variables are sums, so ranks can add them up (common/trainer.py).
    ``per_segment``: NVIDIA's figure, each segment's mean NLL weighted equally; a rank holding
    ``rows`` of the ``global_rows`` streams adds that fraction of a segment. Otherwise the mean
    over every token. ``exp=False``: the mean NLL itself (NVIDIA's ``eval_loss``)."""

    def __init__(self, name: str, per_segment: bool, global_rows: int = 1, exp: bool = True):
        super().__init__(name=name, dtype="float32")
        self.per_segment, self.global_rows, self.exp = per_segment, global_rows, exp
        self.loss_sum = self.add_variable(shape=(), initializer="zeros", name="loss_sum",
                                          dtype="float64")
        self.weight = self.add_variable(shape=(), initializer="zeros", name="weight",
                                        dtype="float64")

    def update_state(self, nll, valid=None):
        """``nll`` (rows, time); ``valid`` (time,) bool: the time steps that count (padding
        after a short last segment does not)."""
        nll = tf.cast(nll, tf.float64)
        rows = tf.cast(tf.shape(nll)[0], tf.float64)
        if valid is None:
            tokens = tf.cast(tf.size(nll), tf.float64)
        else:
            nll = tf.where(valid[None, :], nll, tf.constant(0.0, tf.float64))
            tokens = rows * tf.reduce_sum(tf.cast(valid, tf.float64))
        total = tf.reduce_sum(nll)
        if self.per_segment:  # (sum / (rows * q)) * (rows / global_rows)
            self.loss_sum.assign_add(total / tokens * rows / self.global_rows)
            self.weight.assign_add(rows / self.global_rows)
        else:
            self.loss_sum.assign_add(total)
            self.weight.assign_add(tokens)

    def result(self):
        mean = self.loss_sum / tf.maximum(self.weight, 1e-30)
        return tf.exp(mean) if self.exp else mean
