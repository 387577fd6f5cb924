"""SSD320 v1.2: a ResNet-50 trunk, FPN P3-P7, weight-shared box and class towers.

As NVIDIA's TF-OD config builds it (``ssd_resnet50_v1_fpn`` + ``weight_shared_convolutional_box_
predictor``):

* Trunk (``--trunk``): ``resnet_v1`` (the default) is TF-slim's ``resnet_v1_50`` as TF-OD calls
  it, NVIDIA's own, which TF-slim's public ImageNet checkpoint initialises
  (``ssd/slim_trunk.py``); ``resnet_v1.5`` is this repository's ResNet-50 v1.5
  (``rn50/model.py``, batch norm momentum 0.9), which a ``resnet50v1.5/main.py`` checkpoint or
  an imported torchvision / NVIDIA ResNet-50 initialises. C3, C4, C5 are the trunk's stride 8,
  16 and 32 feature maps (40, 20, 10 at 320); both trunks have the same variables' shapes.
* FPN (depth 256): 1x1 laterals with bias and no batch norm or activation; top-down nearest x2
  upsampling plus addition; a 3x3 smoothing convolution (batch norm + ReLU6, no bias) on the
  merged P4 and P3 only; P5 is the lateral of C5 as it is; P6 and P7 are 3x3 stride-2
  convolutions (batch norm + ReLU6) on P5 and P6 (5 and 3 at 320).
* Towers: box and class, each 4 x [3x3 conv 256 without bias, shared by the five levels ->
  batch norm of its own per level -> ReLU6]; heads 3x3 with bias, 6 anchors x 4 codes and
  6 x (classes + 1) logits, class bias -4.6. Initialisers: N(0, 0.01) in towers and heads,
  truncated N(0, 0.03) in the FPN. Batch norm: momentum 0.997, epsilon 1e-3.
* Outputs in float32 under any precision policy: class logits (N, anchors, classes + 1) (column
  0 is background) and box codes (N, anchors, 4), levels concatenated 3..7, each level
  row-major with the 6 anchors of a location together, as ``anchors.generate`` orders them.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math

import keras
from keras import layers

from common import precision
from common.layers.conv2d import Conv2D
from common.layers.fused_batch_norm import FusedBatchNormalization
from rn50.model import resnet_trunk
from ssd import anchors, config
from ssd.slim_trunk import slim_trunk

CLASS_BIAS = -math.log((1 - 0.01) / 0.01)  # -4.595: every class starts at probability 0.01


@dataclasses.dataclass(frozen=True)
class SSDConfig:
    resnet: str  # the trunk's size: an architecture of rn50.model.ARCHS
    depth: int  # FPN and tower width
    tower_layers: int = 4


ARCHS = {
    "resnet50": SSDConfig(resnet="resnet50", depth=256),
    "resnet_tiny": SSDConfig(resnet="resnet_tiny", depth=32),  # tests and demos
}
TRUNKS = config.TRUNKS  # TF-slim's resnet_v1 (NVIDIA's), this repository's ResNet-50 v1.5

_BN = dict(momentum=0.997, epsilon=1e-3)
FLOAT32_PARTS = config.FLOAT32_PARTS  # main.py's --float32_parts


def _in(part: str, parts: frozenset):
    """Keras' policy float32 while ``part``'s layers are made, where ``parts`` holds it: those
    layers cast their inputs up and compute in float32 (their weights are float32 either way)."""
    return precision.dtype_policy("float32") if part in parts else contextlib.nullcontext()


def part_of(layer: str) -> str | None:
    """The part of ``FLOAT32_PARTS`` that the layer ``build_ssd`` names ``layer`` belongs to;
    None for the input and the outputs' float32 concatenations (``class``, ``box``)."""
    if layer in ("images", "class", "box"):
        return None
    if layer.startswith("fpn_"):
        return "fpn"
    if "_tower" in layer:
        return "towers"
    if layer.endswith("_head") or layer.startswith(("class_p", "box_p")):
        return "heads"
    return "trunk"


# TF-OD's initializers for the FPN and the predictor. A new instance for every kernel: a Keras
# initializer returns the same values at every call, and its seed is drawn when it is made
# (after --seed here, not at import); one shared instance started all eight tower convolutions
# identical.
def _fpn_init():
    return keras.initializers.TruncatedNormal(stddev=0.03)


def _head_init():
    return keras.initializers.RandomNormal(stddev=0.01)


def _bn_relu6(x, name):
    x = FusedBatchNormalization(name=f"{name}_bn", **_BN)(x)
    return layers.ReLU(max_value=6.0, name=f"{name}_relu6")(x)


def _fpn(c3, c4, c5, depth):
    """P3-P7 from C3-C5."""
    def conv(x, kernel, stride, name, bias):
        return Conv2D(depth, kernel, strides=stride, padding="same", use_bias=bias,
                      kernel_initializer=_fpn_init(), name=name)(x)

    def up(x, name):
        return layers.UpSampling2D(2, name=name)(x)

    lat = {lvl: conv(c, 1, 1, f"fpn_lateral_p{lvl}", True)
           for lvl, c in ((3, c3), (4, c4), (5, c5))}
    p5 = lat[5]  # (N, S/32, S/32, d): no smoothing, no activation
    td4 = layers.Add(name="fpn_merge_p4")([up(p5, "fpn_up_p4"), lat[4]])
    td3 = layers.Add(name="fpn_merge_p3")([up(td4, "fpn_up_p3"), lat[3]])
    p4 = _bn_relu6(conv(td4, 3, 1, "fpn_smooth_p4", False), "fpn_smooth_p4")
    p3 = _bn_relu6(conv(td3, 3, 1, "fpn_smooth_p3", False), "fpn_smooth_p3")
    p6 = _bn_relu6(conv(p5, 3, 2, "fpn_p6", False), "fpn_p6")  # (N, S/64, S/64, d)
    p7 = _bn_relu6(conv(p6, 3, 2, "fpn_p7", False), "fpn_p7")  # (N, S/128, S/128, d)
    return [p3, p4, p5, p6, p7]


def _predictor(features, depth, tower_layers, num_outputs, name, bias_init, parts=frozenset()):
    """One tower + head applied to every level with shared convolutions; (N, sum H*W*6, K).
    The towers' and the heads' layers in float32 where ``parts`` names them."""
    with _in("towers", parts):
        convs = [Conv2D(depth, 3, padding="same", use_bias=False,
                        kernel_initializer=_head_init(), name=f"{name}_tower_conv{i}")
                 for i in range(tower_layers)]
    with _in("heads", parts):
        head = Conv2D(anchors.ANCHORS_PER_LOCATION * num_outputs, 3, padding="same",
                      kernel_initializer=_head_init(), bias_initializer=bias_init,
                      name=f"{name}_head")
    outputs = []
    for level, x in zip(range(anchors.MIN_LEVEL, anchors.MAX_LEVEL + 1), features):
        for i, conv in enumerate(convs):
            with _in("towers", parts):
                x = _bn_relu6(conv(x), f"{name}_tower{i}_p{level}")  # a batch norm a level
        x = head(x)  # (N, H, W, 6 * K)
        with _in("heads", parts):  # a 16-bit reshape would round float32 heads' outputs
            outputs.append(layers.Reshape((-1, num_outputs), name=f"{name}_p{level}")(x))
    return layers.Concatenate(axis=1, dtype="float32", name=name)(outputs)  # float32 always


def build_ssd(arch: str = "resnet50", num_classes: int = 90, image_size: int = 320,
              freeze_bn: bool = False, float32_parts=(), trunk: str = "resnet_v1",
              padding: str = "same") -> keras.Model:
    """Normalised images (N, S, S, 3) -> {"cls_logits": (N, A, classes + 1), "box_codes":
    (N, A, 4)}, float32. ``image_size`` must be a multiple of 32 (the FPN adds C4 to upsampled
    C5, and so on). ``float32_parts``: the parts of ``FLOAT32_PARTS`` that compute in float32
    under a 16-bit policy (the task's default: the FPN under bfloat16,
    ``devices.Capabilities.float32_fpn``). ``trunk``: one of ``TRUNKS``; ``padding``: the v1.5
    trunk's (``rn50.model.PADDINGS``, that of the checkpoint it starts from)."""
    cfg = ARCHS[arch]
    parts = frozenset(float32_parts)
    if parts - set(FLOAT32_PARTS):
        raise ValueError(f"float32_parts must be among {FLOAT32_PARTS}, not "
                         f"{sorted(parts - set(FLOAT32_PARTS))}")
    inputs = keras.Input((image_size, image_size, 3), name="images")
    with _in("trunk", parts):
        if trunk == "resnet_v1":
            _, c3, c4, c5 = slim_trunk(inputs, cfg.resnet)
        elif trunk == "resnet_v1.5":
            _, c3, c4, c5 = resnet_trunk(inputs, cfg.resnet, padding=padding)
        else:
            raise ValueError(f"trunk must be one of {TRUNKS}, not {trunk!r}")
    with _in("fpn", parts):
        features = _fpn(c3, c4, c5, cfg.depth)
    model = keras.Model(inputs, {
        "cls_logits": _predictor(features, cfg.depth, cfg.tower_layers, num_classes + 1,
                                 "class", keras.initializers.Constant(CLASS_BIAS), parts),
        "box_codes": _predictor(features, cfg.depth, cfg.tower_layers, 4, "box", "zeros", parts),
    }, name=f"ssd_{arch}")
    if freeze_bn:  # Keras 3: a non-trainable batch norm also runs in inference mode
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.trainable = False
    return model


def decayed_kernels(model: keras.Model) -> list:
    """Convolution kernels (trunk, FPN, towers, heads): what NVIDIA's L2 0.0004 applies to."""
    return [layer.kernel for layer in model.layers if isinstance(layer, layers.Conv2D)]
