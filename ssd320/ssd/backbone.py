"""Initialises SSD's trunk from a ``resnet50v1.5/main.py`` checkpoint (NVIDIA starts from an
ImageNet classification checkpoint the same way: trunk weights and batch-norm statistics; the
FPN and the towers start fresh)."""
from __future__ import annotations

import gc
import os

import keras
import numpy as np
import tensorflow as tf

from common import checkpoints
from common.errors import DataError
from rn50.model import build_resnet


def _prefix(path: str) -> str:
    if os.path.isdir(path):
        steps = checkpoints.on_disk(path)
        if not steps:
            raise DataError(f"--backbone_checkpoint {path} holds no ckpt-N checkpoint")
        return os.path.join(path, f"{checkpoints.PREFIX}-{steps[0]}")
    if not os.path.exists(path + ".index"):
        raise DataError(f"--backbone_checkpoint {path} is neither a checkpoint prefix nor a "
                        "directory of checkpoints")
    return path


def load_trunk(model: keras.Model, path: str, arch: str) -> int:
    """Copies every trunk layer's weights from the ResNet checkpoint; returns how many layers."""
    prefix = _prefix(path)
    reason = checkpoints.unreadable(prefix)
    if reason:
        raise DataError(f"--backbone_checkpoint {prefix} cannot be read ({reason})")
    # The classifier's width is the only 2-D variable: rebuild the ResNet it was saved from.
    # (Keys follow the first path to each variable, often the optimizer's, so go by shape.)
    dense = {tuple(shape) for _, shape in tf.train.list_variables(prefix) if len(shape) == 2}
    if len(dense) != 1:
        raise DataError(f"--backbone_checkpoint {prefix} is not a resnet50v1.5 checkpoint")
    resnet = build_resnet(arch, num_classes=dense.pop()[1])
    failure = None
    try:  # another ResNet's checkpoint fails here (shapes) or in the match (missing layers)
        status = tf.train.Checkpoint(model=resnet).restore(prefix)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        failure = str(e).splitlines()[0][:200]
    if failure is not None:
        # A restore that failed half-way leaves TensorFlow's restore coordinator without
        # expect_partial(): collected later, it would print a warning for each of its ~100
        # unmatched values after this error. Collect it now, with those warnings silenced.
        logger, level = tf.get_logger(), tf.get_logger().level
        logger.setLevel("ERROR")
        try:
            del resnet
            gc.collect()
        finally:
            logger.setLevel(level)
        raise DataError(f"--backbone_checkpoint {prefix} does not fit --arch {arch} "
                        f"({failure})")
    loaded = 0
    for layer in resnet.layers:
        if layer.weights and layer.name != "logits":
            target = model.get_layer(layer.name)
            target.set_weights([np.asarray(w) for w in layer.get_weights()])
            loaded += 1
    return loaded
