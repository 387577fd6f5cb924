"""ResNet-50 v1.5 (and a tiny variant with the same structure, for tests).

v1.5 differs from the original v1 in one place: a downsampling bottleneck puts its stride on the
3x3 convolution instead of the first 1x1, which costs a little speed and gains ~0.5% top-1.
Convolutions have no bias (batch norm follows each one); batch norm uses epsilon 1e-5 and
momentum 0.9 as in NVIDIA's scripts, on TensorFlow's fused kernel
(common/layers/fused_batch_norm.py). The classifier runs in float32 under any precision policy.

Strided convolutions and the stem's max-pool pad as TensorFlow's ``same`` does (NVIDIA's
TensorFlow scripts: the extra row and column after the image), or, with ``padding="symmetric"``,
as PyTorch's ``padding=k // 2`` does (torchvision's and timm's ResNet-50: the same rows before
and after). The weights are the same; the two compute a slightly different function, so a
checkpoint records which one it was trained or imported with (``rn50/import_weights.py``).
"""
from __future__ import annotations

import dataclasses

import keras
from keras import layers

from common.layers.conv2d import Conv2D
from common.layers.fused_batch_norm import FusedBatchNormalization


@dataclasses.dataclass(frozen=True)
class ResNetConfig:
    blocks: tuple[int, ...]  # bottleneck blocks per stage
    width: int = 64  # filters of the first stage's 3x3 convolutions; doubled at each stage


ARCHS = {
    "resnet50": ResNetConfig(blocks=(3, 4, 6, 3)),
    "resnet_tiny": ResNetConfig(blocks=(1, 1, 1, 1), width=8),  # tests and smoke runs
}

_BN = dict(epsilon=1e-5, momentum=0.9)
PADDINGS = ("same", "symmetric")


def _conv_init():
    """He-normal over fan-out, as in NVIDIA's and torchvision's ResNet-50. A new instance for
    every kernel: a Keras initializer returns the same values at every call, and its seed is
    drawn when it is made (after ``--seed`` here, not at import)."""
    return keras.initializers.VarianceScaling(2.0, "fan_out", "untruncated_normal")


def _conv_bn(x, filters, kernel, stride, name, fmt, relu=True, zero_gamma=False, pad="same"):
    padding = "same"
    if pad == "symmetric" and stride > 1 and kernel > 1:  # PyTorch's k // 2 on every side
        x = layers.ZeroPadding2D(kernel // 2, data_format=fmt, name=f"{name}_pad")(x)
        padding = "valid"
    x = Conv2D(filters, kernel, strides=stride, padding=padding, use_bias=False,
               data_format=fmt, kernel_initializer=_conv_init(), name=f"{name}_conv")(x)
    x = FusedBatchNormalization(axis=_channel_axis(fmt), name=f"{name}_bn",
                                  gamma_initializer="zeros" if zero_gamma else "ones", **_BN)(x)
    return layers.ReLU(name=f"{name}_relu")(x) if relu else x


def _channel_axis(fmt):
    return 1 if fmt == "channels_first" else -1


def _bottleneck(x, filters, stride, name, fmt, zero_init_residual, pad):
    shortcut = x
    if stride != 1 or x.shape[_channel_axis(fmt)] != 4 * filters:
        shortcut = _conv_bn(x, 4 * filters, 1, stride, f"{name}_proj", fmt, relu=False)
    x = _conv_bn(x, filters, 1, 1, f"{name}_1", fmt)
    x = _conv_bn(x, filters, 3, stride, f"{name}_2", fmt, pad=pad)  # v1.5: the stride is here
    x = _conv_bn(x, 4 * filters, 1, 1, f"{name}_3", fmt, relu=False, zero_gamma=zero_init_residual)
    x = layers.Add(name=f"{name}_add")([x, shortcut])
    return layers.ReLU(name=f"{name}_out")(x)


def resnet_trunk(x, arch: str = "resnet50", fmt: str = "channels_last",
                 zero_init_residual: bool = False, padding: str = "same") -> list:
    """Stem and the four stages on ``x``; returns each stage's output (strides 4, 8, 16, 32).
    SSD320 takes its C3-C5 from the last three, with these layer names, so that a ResNet
    checkpoint's trunk loads into it."""
    if padding not in PADDINGS:
        raise ValueError(f"padding must be one of {PADDINGS}, not {padding!r}")
    cfg = ARCHS[arch]
    x = _conv_bn(x, cfg.width, 7, 2, "stem", fmt, pad=padding)  # (N, H/2, W/2, w)
    pool_padding = "same"
    if padding == "symmetric":  # zeros are as good as -inf after a ReLU
        x = layers.ZeroPadding2D(1, data_format=fmt, name="stem_pool_pad")(x)
        pool_padding = "valid"
    x = layers.MaxPool2D(3, strides=2, padding=pool_padding, data_format=fmt,
                         name="stem_pool")(x)
    outputs = []
    for stage, n in enumerate(cfg.blocks):  # (N, H/4, W/4, 4w) ... (N, H/32, W/32, 32w)
        for block in range(n):
            stride = 2 if block == 0 and stage > 0 else 1
            x = _bottleneck(x, cfg.width * 2 ** stage, stride,
                            f"stage{stage + 1}_block{block + 1}", fmt, zero_init_residual,
                            padding)
        outputs.append(x)
    return outputs


def build_resnet(arch: str = "resnet50", num_classes: int = 1000, image_size: int = 224,
                 data_format: str = "NHWC", zero_init_residual: bool = False,
                 padding: str = "same") -> keras.Model:
    """Images (N, H, W, 3) float32, normalised -> logits (N, num_classes) float32."""
    fmt = "channels_first" if data_format == "NCHW" else "channels_last"
    inputs = keras.Input((image_size, image_size, 3), name="images")
    x = inputs
    if fmt == "channels_first":  # some cuDNN kernels prefer NCHW; the input pipelines stay NHWC
        x = layers.Permute((3, 1, 2), name="to_nchw")(x)
    x = resnet_trunk(x, arch, fmt, zero_init_residual, padding)[-1]
    x = layers.GlobalAveragePooling2D(data_format=fmt, name="avg_pool")(x)  # (N, 32w)
    logits = layers.Dense(num_classes, dtype="float32", name="logits",
                          kernel_initializer=keras.initializers.RandomNormal(stddev=0.01))(x)
    return keras.Model(inputs, logits, name=arch)  # (N, num_classes) float32


def decayed_kernels(model: keras.Model) -> list:
    """Convolution and classifier kernels: what NVIDIA's weight decay (L2) applies to; batch
    norm's scales and offsets and the classifier's bias are not decayed."""
    return [layer.kernel for layer in model.layers
            if isinstance(layer, (layers.Conv2D, layers.Dense))]
