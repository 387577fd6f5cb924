"""Bias additions whose gradient is right in bfloat16 on a CPU.

Keras adds every layer's bias with ``tf.nn.bias_add`` (its TensorFlow backend turns
``ops.add(x, vector)`` into it, so that the addition fuses into the matmul or convolution).
The gradient of that op, ``BiasAddGrad``, sums the rows in the input's type on a CPU: in
bfloat16 a sum stops growing at 256 (adding 1 to 256 rounds back to 256), so the bias gradient
of a layer over thousands of rows is wrong by up to its own size. Measured with TensorFlow 2.17
(NGC 25.02's) and 2.21: 6,144 rows of ones sum to 256; Gaussian (6144, 2048) gradients came out
15% of the largest value off, where TensorFlow's ``Sum`` of the same bfloat16 tensor, which
accumulates in float32, is within its bfloat16 rounding (0.3%). TensorFlow issue 86378 reports
the CPU and GPU results of ``BiasAddGrad`` disagreeing.

On a CPU, ``add_bias`` adds a 16-bit bias with ``bias_add`` and takes its gradient with that
``Sum`` (timings in docs/performance/); float32 keeps ``bias_add``'s own gradient, which is
right and faster. A GPU's ``BiasAddGrad`` accumulates 16-bit inputs in float32, and there the
plain ``bias_add`` is what Grappler fuses with the matmul or convolution before it (cuBLASLt's
bias epilogue, ``_FusedMatMul``), which the custom gradient's ``IdentityN`` would block; so the
workaround is for a CPU only (``common.runtime.devices.current``). ``Dense`` is Keras' layer adding
its bias so; the convolutions do the same (``common.layers.conv2d.Conv2D``).
"""
from __future__ import annotations

import keras
import tensorflow as tf

from common.runtime import devices


def add_bias(x, bias, data_format: str = "channels_last"):
    """``x`` plus ``bias`` (channels), broadcast over every other axis."""
    fmt = "NCHW" if data_format == "channels_first" and x.shape.rank > 2 else "NHWC"
    bias = tf.cast(bias, x.dtype)
    if x.dtype not in (tf.bfloat16, tf.float16) or not devices.current().bias_gradient_by_sum:
        return tf.nn.bias_add(x, bias, data_format=fmt)
    return _bias_add_16bit(x, bias, fmt)


def _bias_add_16bit(x, bias, fmt):
    """``bias_add`` forwards (it fuses into the matmul or convolution before it), with the
    bias gradient summed by ``Sum``, which accumulates in float32."""
    axes = [0] + list(range(2, x.shape.rank)) if fmt == "NCHW" else list(range(x.shape.rank - 1))

    @tf.custom_gradient
    def add(x, bias):
        return tf.nn.bias_add(x, bias, data_format=fmt), lambda dy: (dy, tf.reduce_sum(dy, axes))
    return add(x, bias)


class Dense(keras.layers.Dense):
    """``keras.layers.Dense`` whose bias is added by ``add_bias`` (same weights, same names)."""

    def call(self, inputs, training=None):
        x = keras.ops.matmul(inputs, self.kernel)
        if self.bias is not None:
            x = add_bias(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x
