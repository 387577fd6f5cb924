"""Batch normalisation on TensorFlow's fused kernel.

Keras 3 normalises in about ten separate ops (moments, then normalise), which TensorFlow runs
one by one; ``FusedBatchNormV3`` is a single oneDNN (CPU) or cuDNN (GPU) kernel, about twice as
fast forward and backward on this project's CPU. This layer keeps Keras' variables, maths and
checkpoints and only swaps the kernel for 4-D inputs (NHWC or NCHW); anything else (masks,
renorm, other ranks) falls back to Keras' own path.

Two small differences from Keras' path, both as in Keras 2 and NVIDIA's TF1 scripts: float16
and bfloat16 inputs go into the kernel as they are (it accumulates in float32 internally), and
the moving variance is updated with the unbiased (n/(n-1)) batch variance.
"""
from __future__ import annotations

import keras
import tensorflow as tf


class FusedBatchNormalization(keras.layers.BatchNormalization):
    def _fused_format(self, inputs):
        if len(inputs.shape) != 4 or self.renorm or self.synchronized:
            return None
        axis = self.axis if self.axis >= 0 else self.axis + 4
        return {3: "NHWC", 1: "NCHW"}.get(axis)

    def call(self, inputs, training=None, mask=None):
        data_format = None if mask is not None else self._fused_format(inputs)
        if data_format is None:
            return super().call(inputs, training=training, mask=mask)
        channels = inputs.shape[3 if data_format == "NHWC" else 1]
        gamma = self.gamma if self.scale else tf.ones((channels,), tf.float32)
        beta = self.beta if self.center else tf.zeros((channels,), tf.float32)
        x = inputs if inputs.dtype in (tf.float16, tf.bfloat16, tf.float32) else \
            tf.cast(inputs, tf.float32)
        if training and self.trainable:
            # The kernel also folds the batch statistics into the moving averages.
            y, moving_mean, moving_variance = tf.compat.v1.nn.fused_batch_norm(
                x, gamma, beta, mean=self.moving_mean, variance=self.moving_variance,
                epsilon=self.epsilon, data_format=data_format, is_training=True,
                exponential_avg_factor=1.0 - self.momentum)
            self.moving_mean.assign(moving_mean)
            self.moving_variance.assign(moving_variance)
        else:
            y, _, _ = tf.compat.v1.nn.fused_batch_norm(
                x, gamma, beta, mean=self.moving_mean, variance=self.moving_variance,
                epsilon=self.epsilon, data_format=data_format, is_training=False)
        return tf.cast(y, self.compute_dtype)
