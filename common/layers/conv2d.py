"""A Keras ``Conv2D`` whose bfloat16 gradients are right on every input size.

oneDNN's bfloat16 weight-gradient kernel (``Conv2DBackpropFilter``, the path TensorFlow takes on
CPUs with AVX512-BF16 or AMX) returns garbage, values such as 1e21 or NaN from memory it never
wrote, when a ``same``-padded convolution's input is narrower than its stride, so that the
output is one column wide and the kernel reaches into the padding (measured with TF 2.21 on an
AMD EPYC with AVX512-BF16: every such geometry in a sweep of 1-6 wide inputs, strides 2-4 and
kernels 3-7; float32, and bfloat16 with ``TF_ENABLE_ONEDNN_OPTS=0``, are right). SSD320 meets
it at ``--image_size 64``, where ``fpn_p7`` is a stride-2 3x3 convolution on a 1x1 P6.

Padding such an input explicitly and convolving with ``valid`` padding computes the same
function (TensorFlow's ``same`` padding: total // 2 zeros before, the rest after) with no
padding inside the kernel, which oneDNN gets right. Only those degenerate convolutions take
the detour, on tensors a few pixels wide; every other one is Keras' own.

The bias is added by ``common.layers.bias.add_bias``: Keras' ``bias_add`` has a bfloat16 gradient
that stops summing at 256 on a CPU (see there).

In bfloat16 training on a CPU, a 1x1 convolution's weight gradient is computed as the matrix
product it is (the input's pixels, subsampled by the stride, against the output gradient's)
instead of by oneDNN's weight-gradient convolution kernel, which on a Xeon with AMX runs these
problems several times slower than its AMX matmul does the same FLOPs (the measurements:
docs/performance/resnet50v1.5.md); on an AVX512-BF16 CPU without AMX the two were level. The
forward pass and the input gradient stay oneDNN's convolutions, and
so does every float32 and float16 convolution and every convolution on a GPU (cuDNN).
"""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import ops

from common.layers.bias import add_bias
from common.runtime import devices


def same_padding(size: int, kernel: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TensorFlow's ``same`` padding of one spatial dimension: (before, after)."""
    reach = dilation * (kernel - 1) + 1
    out = -(-size // stride)
    total = max((out - 1) * stride + reach - size, 0)
    return total // 2, total - total // 2


class Conv2D(keras.layers.Conv2D):
    def _explicit_padding(self, shape):
        """The full padding of an input whose static shape is degenerate (see above), else
        None."""
        if self.padding != "same":
            return None
        spatial = shape[1:3] if self.data_format == "channels_last" else shape[2:4]
        if any(n is None for n in spatial):
            return None
        if not any(n < s for n, s in zip(spatial, self.strides)):
            return None
        pads = [same_padding(n, k, s, d) for n, k, s, d in
                zip(spatial, self.kernel_size, self.strides, self.dilation_rate)]
        return ([(0, 0), *pads, (0, 0)] if self.data_format == "channels_last"
                else [(0, 0), (0, 0), *pads])

    def _matmul_weight_gradient(self, inputs, training) -> bool:
        """Whether this call takes the 1x1 path of the module docstring."""
        return (bool(training) and tuple(self.kernel_size) == (1, 1)
                and tuple(self.dilation_rate) == (1, 1) and self.groups == 1
                and self.data_format == "channels_last" and inputs.dtype == tf.bfloat16
                and devices.current().pointwise_gradient_as_matmul)

    def convolution_op(self, inputs, kernel, training=None):
        if self._matmul_weight_gradient(inputs, training):
            return pointwise_conv(inputs, kernel, tuple(self.strides))
        pads = self._explicit_padding(inputs.shape)
        if pads is None:
            return super().convolution_op(inputs, kernel)
        return ops.conv(ops.pad(inputs, pads), kernel, strides=list(self.strides),
                        padding="valid", dilation_rate=self.dilation_rate,
                        data_format=self.data_format)

    def call(self, inputs, training=None):
        outputs = self.convolution_op(inputs, self.kernel, training=training)
        if self.use_bias:
            outputs = add_bias(outputs, self.bias, self.data_format)
        if self.activation is not None:
            return self.activation(outputs)
        return outputs


def pointwise_conv(x, kernel, strides=(1, 1)):
    """A 1x1 convolution of NHWC ``x`` (``same`` and ``valid`` padding are the same for it), with
    the weight gradient as one matrix product. The input gradient is TensorFlow's own."""
    kernel = tf.convert_to_tensor(kernel)
    conv_strides = [1, *strides, 1]

    @tf.custom_gradient
    def conv(x, kernel):
        y = tf.nn.conv2d(x, kernel, conv_strides, "VALID")

        def grad(dy):
            dx = tf.raw_ops.Conv2DBackpropInput(
                input_sizes=tf.shape(x), filter=kernel, out_backprop=dy, strides=conv_strides,
                padding="VALID")
            pixels = subsample(x, strides)
            dk = tf.linalg.matmul(tf.reshape(pixels, (-1, kernel.shape[2])),
                                  tf.reshape(dy, (-1, kernel.shape[3])), transpose_a=True)
            return dx, tf.reshape(dk, tf.shape(kernel))
        return y, grad
    return conv(x, kernel)


def subsample(x, strides):
    """``x[:, ::sh, ::sw, :]`` of NHWC ``x``. Where the static height and width divide by the
    strides it is a reshape and a slice at a fixed index, which TensorFlow copies an order of
    magnitude faster than the equivalent strided slice (docs/performance/resnet50v1.5.md)."""
    sh, sw = strides
    if (sh, sw) == (1, 1):
        return x
    _, h, w, c = x.shape
    if h is None or w is None or h % sh or w % sw:
        return x[:, ::sh, ::sw, :]
    return tf.reshape(x, (-1, h // sh, sh, w // sw, sw, c))[:, :, 0, :, 0, :]
