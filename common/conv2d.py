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

The bias is added by ``common.bias.add_bias``: Keras' ``bias_add`` has a bfloat16 gradient that
stops summing at 256 on a CPU (see there).
"""
from __future__ import annotations

import keras
from keras import ops

from common.bias import add_bias


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

    def convolution_op(self, inputs, kernel):
        pads = self._explicit_padding(inputs.shape)
        if pads is None:
            return super().convolution_op(inputs, kernel)
        return ops.conv(ops.pad(inputs, pads), kernel, strides=list(self.strides),
                        padding="valid", dilation_rate=self.dilation_rate,
                        data_format=self.data_format)

    def call(self, inputs):
        outputs = self.convolution_op(inputs, self.kernel)
        if self.use_bias:
            outputs = add_bias(outputs, self.bias, self.data_format)
        if self.activation is not None:
            return self.activation(outputs)
        return outputs
