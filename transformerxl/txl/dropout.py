"""Dropout whose mask does not depend on the compute dtype."""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers


class Dropout(layers.Dropout):
    """``keras.layers.Dropout`` whose keep-mask is always drawn from float32 uniforms. Keras
    draws them in the input's dtype, so under mixed precision one seed drops other units than
    in float32, and drawing bfloat16 uniforms is slower on a CPU. Here FP32 and AMP runs of one
    seed see the same masks (which makes their learning curves comparable); float32 inputs take
    Keras's own path, unchanged. ``noise_shape`` is not supported (refused, not ignored)."""

    def __init__(self, rate, noise_shape=None, **kwargs):
        if noise_shape is not None:
            raise ValueError("txl.dropout.Dropout draws a full mask: noise_shape is not supported")
        super().__init__(rate, **kwargs)

    def call(self, inputs, training=False):
        if not training or self.rate == 0 or inputs.dtype == tf.float32:
            return super().call(inputs, training=training)
        # The draw keras.random.dropout makes for a float32 input: same seed, same uniforms.
        keep = keras.random.uniform(tf.shape(inputs), dtype="float32",
                                    seed=self.seed_generator) >= self.rate
        scaled = inputs * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(keep, scaled, tf.zeros((), inputs.dtype))
