"""SSD320's trunk as NVIDIA builds it: TF-slim's ``resnet_v1_50`` the way TF-OD's
``ssd_resnet50_v1_fpn`` feature extractor calls it, so that TF-slim's public ImageNet checkpoint
(``resnet_v1_50_2016_08_28``, NVIDIA's ``fine_tune_checkpoint``) initialises it.

What makes it TF-slim's and not this repository's ResNet-50 v1.5 (``rn50/model.py``):

* The downsampling stride sits in the last unit of blocks 1-3 (on its 3x3 convolution), not in
  the first unit of stages 2-4; block 4 keeps stride 1.
* TF-OD asks for ``store_non_strided_activations``: the last unit of a strided block runs at
  stride 1, its output is the block's feature map (C3 is block 2's at stride 8, C4 block 3's at
  stride 16), and the next block starts from it decimated (``subsample``: a 1x1 max-pool of
  stride 2, every other row and column). At inference this equals a stride-2 unit; in training
  the batch norms of that unit see the full map, as NVIDIA's do.
* The root 7x7 stride-2 convolution pads explicitly, 3 zeros on every side, then convolves
  ``valid`` (slim's ``conv2d_same``); the 3x3 max-pool is ``same``.
* NVIDIA's ``override_base_feature_extractor_hyperparams`` puts ReLU6 after the root
  convolution and the first two convolutions of every bottleneck; the residual sum keeps ReLU.
* Batch norm: decay 0.997, epsilon 1e-5 (``resnet_arg_scope``); convolutions have no bias.

C3, C4, C5 are 40, 20 and 10 wide at 320, as with the v1.5 trunk, with the same channel counts
(512, 1024, 2048) and the same parameter count. The inputs are this repository's normalised
images ((x - mean) / std); slim's network takes x - mean, so ``ssd/backbone.py`` folds the
standard deviations into the root convolution's weights when it loads slim's checkpoint.
"""
from __future__ import annotations

import dataclasses

from keras import layers

from common.layers.conv2d import Conv2D
from common.layers.fused_batch_norm import FusedBatchNormalization

_BN = dict(momentum=0.997, epsilon=1e-5)
ROOT_DEPTH = 64  # slim's resnet_v1 builds its root with 64 filters whatever its blocks are


@dataclasses.dataclass(frozen=True)
class Block:
    name: str  # slim's scope: block1 ... block4
    base_depth: int  # the bottleneck's width; its output is 4x
    units: int
    stride: int  # of its last unit


def blocks(arch: str) -> list[Block]:
    """slim's ``resnet_v1_50`` blocks, or the tiny trunk's (one unit per block, width 8)."""
    units, width = {"resnet50": ((3, 4, 6, 3), 64), "resnet_tiny": ((1, 1, 1, 1), 8)}[arch]
    return [Block(f"block{i + 1}", width * 2 ** i, n, 2 if i < 3 else 1)
            for i, n in enumerate(units)]


def _conv_bn(x, filters, kernel, name, relu6=True):
    """slim's conv2d with batch norm: layer ``name`` (its ``weights``) and ``name_bn`` (its
    ``BatchNorm``), stride 1, ``same``."""
    x = Conv2D(filters, kernel, padding="same", use_bias=False, name=name)(x)
    x = FusedBatchNormalization(name=f"{name}_bn", **_BN)(x)
    return layers.ReLU(max_value=6.0, name=f"{name}_relu6")(x) if relu6 else x


def _bottleneck(x, depth, base_depth, name):
    """slim's ``bottleneck`` at stride 1 (its ``bottleneck_v1`` scope is ``name``)."""
    if x.shape[-1] == depth:
        shortcut = x
    else:
        shortcut = _conv_bn(x, depth, 1, f"{name}_shortcut", relu6=False)
    r = _conv_bn(x, base_depth, 1, f"{name}_conv1")
    r = _conv_bn(r, base_depth, 3, f"{name}_conv2")
    r = _conv_bn(r, depth, 1, f"{name}_conv3", relu6=False)
    x = layers.Add(name=f"{name}_add")([shortcut, r])
    return layers.ReLU(name=f"{name}_out")(x)


def unit_name(block: Block, unit: int) -> str:
    """The layer-name prefix of slim's ``<block>/unit_<unit>/bottleneck_v1``."""
    return f"{block.name}_unit_{unit}"


def slim_trunk(x, arch: str = "resnet50") -> list:
    """Normalised images (N, S, S, 3) -> [C2, C3, C4, C5], the non-strided outputs of blocks
    1-4 (strides 4, 8, 16, 32)."""
    x = layers.ZeroPadding2D(3, name="conv1_pad")(x)  # conv2d_same: 3 before and after
    x = Conv2D(ROOT_DEPTH, 7, strides=2, padding="valid", use_bias=False,
               name="conv1")(x)  # (N, S/2, S/2, 64)
    x = FusedBatchNormalization(name="conv1_bn", **_BN)(x)
    x = layers.ReLU(max_value=6.0, name="conv1_relu6")(x)
    x = layers.MaxPool2D(3, strides=2, padding="same", name="pool1")(x)  # (N, S/4, S/4, 64)
    outputs = []
    for block in blocks(arch):
        for unit in range(1, block.units + 1):
            x = _bottleneck(x, 4 * block.base_depth, block.base_depth, unit_name(block, unit))
        outputs.append(x)  # the block's end point, before the decimation
        if block.stride > 1:  # slim's subsample: a 1x1 max-pool of stride 2
            x = layers.MaxPool2D(1, strides=block.stride, name=f"{block.name}_subsample")(x)
    return outputs
