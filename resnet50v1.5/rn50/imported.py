"""What every source of ImageNet weights gives (``Imported``) and the helpers their readers
share: this network's blocks by name, a PyTorch kernel in TensorFlow's layout, each source
tensor used exactly once. No TensorFlow: the state-dict reader runs beside PyTorch alone."""
from __future__ import annotations

import dataclasses

import numpy as np

from common.errors import DataError

BN = ("gamma", "beta", "moving_mean", "moving_variance")


@dataclasses.dataclass
class Imported:
    """What a source gave: weights by (our layer, its weight), the classifier's classes in the
    source (0 without one), the padding its network computes with, and notes to print."""
    weights: dict
    classes: int
    padding: str
    notes: list


def blocks(arch: str):
    """(stage 1..4, block 1..n) of the architecture, as rn50.model builds it."""
    from rn50.model import ARCHS
    for s, n in enumerate(ARCHS[arch].blocks, 1):
        for b in range(1, n + 1):
            yield s, b


def keras_blocks(arch: str, block_name):
    """(our layer, theirs) of each block's convolutions in the naming keras.applications and
    keras-hub share: ``<block>_1`` to ``_3``, the projection ``<block>_0`` (``block_name(s, b)``
    names stage ``s``'s block ``b``)."""
    for s, b in blocks(arch):
        theirs = block_name(s, b)
        for k in (1, 2, 3):
            yield f"stage{s}_block{b}_{k}", f"{theirs}_{k}"
        if b == 1:
            yield f"stage{s}_block{b}_proj", f"{theirs}_0"


def conv_kernel(w_oihw):
    return np.transpose(w_oihw, (2, 3, 1, 0))  # PyTorch OIHW -> TensorFlow HWIO


def take(source: dict, key: str, used: set, where: str):
    if key not in source:
        raise DataError(f"{where} has no {key}: not a ResNet-50 of this architecture")
    used.add(key)
    return np.asarray(source[key], np.float32)


def leftovers(source, used, where, ignore=lambda k: False):
    extra = sorted(k for k in source if k not in used and not ignore(k))
    if extra:
        raise DataError(f"{where} holds {len(extra)} tensors this ResNet-50 does not have "
                        f"(first: {extra[0]}): another network's weights?")


# --- PyTorch: torchvision and timm ----------------------------------------------------------
