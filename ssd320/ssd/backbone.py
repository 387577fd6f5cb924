"""Initialises SSD's trunk from an ImageNet classifier's checkpoint, as NVIDIA's recipe does
(TF-OD's ``fine_tune_checkpoint_type: classification``: the trunk's weights and batch-norm
statistics; the FPN and the towers start fresh).

* ``--trunk resnet_v1``: TF-slim's ``resnet_v1_50`` checkpoint, TF1's name-based format with the
  release's names (``resnet_v1_50/conv1/weights``, ``resnet_v1_50/block1/unit_1/bottleneck_v1/
  conv2/BatchNorm/moving_mean``, ...): ``resnet_v1_50_2016_08_28``'s ``resnet_v1_50.ckpt``, which
  NVIDIA's ``download_all.sh`` fetches, or the trunk of a TF-OD checkpoint
  (``FeatureExtractor/resnet_v1_50/...``). Every trunk tensor is read and every trunk variable
  set, or one line names what is missing, left over or mis-shaped; the classifier (``logits``),
  ``global_step`` and optimizer slots are not the trunk's. slim's network takes images less the
  ImageNet mean; this repository's are also divided by the standard deviation, so the root
  convolution's weights are multiplied by it, which computes the same function.
* ``--trunk resnet_v1.5``: a checkpoint of this repository's ResNet-50 (``resnet50v1.5/main.py``
  or ``import_weights.py``), rebuilt as its ``settings.json`` says (classes, padding).
"""
from __future__ import annotations

import gc
import os
import re

import keras
import numpy as np
import tensorflow as tf

from common.checkpoint import settings as checkpoint_settings
from common.checkpoint import store
from common.data.images import STD
from common.errors import DataError, one_line
from rn50.model import build_resnet
from ssd.slim_trunk import blocks, unit_name

FLAG = "--backbone_checkpoint"
_ROOT = re.compile(r"^(?P<scope>(?:.*/)?resnet_v1_\d+)/conv1/weights$")
_BN = {"gamma": "gamma", "beta": "beta", "moving_mean": "moving_mean",
       "moving_variance": "moving_variance"}


def _reader(path: str):
    """A reader of the checkpoint at ``path``: a prefix, a TF1 ``.ckpt`` file, or a directory
    holding one checkpoint."""
    prefix = path
    if os.path.isdir(path):
        prefix = tf.train.latest_checkpoint(path)
        if prefix is None:
            found = sorted({f[:-len(".index")] for f in os.listdir(path) if f.endswith(".index")}
                           | {f for f in os.listdir(path) if f.endswith(".ckpt")})
            if len(found) != 1:
                raise DataError(f"{FLAG} {path} holds {len(found)} checkpoints: give the "
                                "prefix of one (DIR/model.ckpt)")
            prefix = os.path.join(path, found[0])
    try:
        return prefix, tf.train.load_checkpoint(prefix)
    except (tf.errors.OpError, ValueError) as e:
        why = one_line(getattr(e, "message", None) or str(e))
        raise DataError(f"{FLAG} {path} cannot be read as a checkpoint ({why[:200]})") from None


def is_slim(reader) -> str | None:
    """The scope of a TF-slim ``resnet_v1_*`` in the checkpoint (``resnet_v1_50``,
    ``FeatureExtractor/resnet_v1_50``), or None."""
    for name, shape in reader.get_variable_to_shape_map().items():
        m = _ROOT.match(name)
        if m and len(shape) == 4:
            return m.group("scope")
    return None


def _slim_names(arch: str, scope: str) -> dict[str, tuple[str, str]]:
    """slim's variable name -> (our layer, its weight) for the whole trunk."""
    out = {f"{scope}/conv1/weights": ("conv1", "kernel")}
    out.update({f"{scope}/conv1/BatchNorm/{v}": ("conv1_bn", w) for v, w in _BN.items()})
    for block in blocks(arch):
        for unit in range(1, block.units + 1):
            base = f"{scope}/{block.name}/unit_{unit}/bottleneck_v1"
            parts = ["conv1", "conv2", "conv3"] + (["shortcut"] if unit == 1 else [])
            for part in parts:
                layer = f"{unit_name(block, unit)}_{part}"
                out[f"{base}/{part}/weights"] = (layer, "kernel")
                out.update({f"{base}/{part}/BatchNorm/{v}": (f"{layer}_bn", w)
                            for v, w in _BN.items()})
    return out


def load_slim_trunk(model: keras.Model, reader, scope: str, arch: str, path: str) -> int:
    """Sets every trunk weight of ``model`` (``--trunk resnet_v1``) from slim's names."""
    shapes = reader.get_variable_to_shape_map()
    names = _slim_names(arch, scope)
    missing = sorted(set(names) - set(shapes))
    if missing:
        raise DataError(f"{FLAG} {path} lacks {len(missing)} of the {len(names)} tensors of "
                        f"--arch {arch}'s trunk (first: {missing[0]})")
    # What else sits under the trunk's scope: the classifier, or optimizer slots of a trunk
    # variable ("<name>/Momentum"), are not the trunk's; anything else is another network's.
    extra = sorted(n for n in shapes if n.startswith(scope + "/") and n not in names
                   and not n.startswith(f"{scope}/logits/")
                   and not any(n.startswith(k + "/") for k in names))
    if extra:
        raise DataError(f"{FLAG} {path} holds {len(extra)} trunk tensors --arch {arch} does not "
                        f"have (first: {extra[0]}): another ResNet's checkpoint?")
    layers = set()
    for name, (layer_name, weight) in names.items():
        value = reader.get_tensor(name)
        if layer_name == "conv1" and weight == "kernel":
            # slim's input is (x - mean); ours (x - mean) / std: scale each input channel.
            value = value * np.asarray(STD, value.dtype)[None, None, :, None]
        variable = getattr(model.get_layer(layer_name), weight)
        if tuple(variable.shape) != tuple(value.shape):
            raise DataError(f"{FLAG} {path}: {name} is {tuple(value.shape)}, the trunk's "
                            f"{layer_name} {weight} {tuple(variable.shape)} (--arch {arch})")
        variable.assign(value)
        layers.add(layer_name)
    return len(layers)


def load_resnet_trunk(model: keras.Model, prefix: str, arch: str, padding: str) -> int:
    """Copies every trunk layer's weights from a resnet50v1.5 checkpoint (``--trunk
    resnet_v1.5``); returns how many layers."""
    reason = store.unreadable(prefix)
    if reason:
        raise DataError(f"{FLAG} {prefix} cannot be read ({reason})")
    found = checkpoint_settings.read(prefix)
    if found and found["model"] != "resnet50v1.5":
        raise DataError(f"{FLAG} {prefix} holds a {found['model']} checkpoint, not a "
                        "resnet50v1.5 one")
    classes = (found or {}).get("settings", {}).get("num_classes")
    if classes is None:
        # Without a record, the classifier's width is the only 2-D variable. (Keys follow the
        # first path to each variable, often the optimizer's, so go by shape.)
        dense = {tuple(s) for _, s in tf.train.list_variables(prefix) if len(s) == 2}
        if len(dense) != 1:
            raise DataError(f"{FLAG} {prefix} is not a resnet50v1.5 checkpoint")
        classes = dense.pop()[1]
    resnet = build_resnet(arch, num_classes=classes, padding=padding)
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
        raise DataError(f"{FLAG} {prefix} does not fit --arch {arch} ({failure})")
    loaded = 0
    for layer in resnet.layers:
        if layer.weights and layer.name != "logits":
            target = model.get_layer(layer.name)
            target.set_weights([np.asarray(w) for w in layer.get_weights()])
            loaded += 1
    return loaded


def _from_slim(model: keras.Model, path: str, arch: str, padding: str) -> str:
    """TF-slim's ``resnet_v1_50`` (``--trunk resnet_v1``), by slim's names."""
    prefix, reader = _reader(path)
    scope = is_slim(reader)
    if scope is None:
        hint = (" (a checkpoint of this repository's ResNet-50 v1.5: add --trunk resnet_v1.5)"
                if "_CHECKPOINTABLE_OBJECT_GRAPH" in reader.get_variable_to_shape_map()
                else "")
        raise DataError(f"{FLAG} {path} holds no TF-slim resnet_v1 (no .../resnet_v1_50/"
                        f"conv1/weights){hint}")
    damaged = store.unreadable(prefix)  # every tensor read: a cut or flipped .data
    if damaged:
        raise DataError(f"{FLAG} {path}: the checkpoint is damaged ({damaged}): download "
                        "or unpack it again")
    n = load_slim_trunk(model, reader, scope, arch, path)
    left = " (its classifier left out)" if any(
        k.startswith(f"{scope}/logits/") for k in reader.get_variable_to_shape_map()) else ""
    return f"initialised {n} trunk layers from {prefix}: TF-slim {scope}{left}"


def _from_resnet(model: keras.Model, path: str, arch: str, padding: str) -> str:
    """A checkpoint of this repository's ResNet-50 v1.5 (``--trunk resnet_v1.5``)."""
    if os.path.isfile(path) and not os.path.exists(path + ".index"):  # a V1 single-file one
        _, reader = _reader(path)
        if is_slim(reader):
            raise DataError(f"{FLAG} {path} is TF-slim's resnet_v1_50 (a TF1 checkpoint "
                            "file), not this repository's ResNet-50 v1.5: drop --trunk "
                            "resnet_v1.5 (--trunk resnet_v1, the default, reads it)")
    prefix = store.resolve(path, FLAG)
    if "_CHECKPOINTABLE_OBJECT_GRAPH" not in dict(tf.train.list_variables(prefix)):
        raise DataError(f"{FLAG} {path} is a TF1 name-based checkpoint, not this repository's "
                        "ResNet-50 v1.5 (TF-slim's resnet_v1_50: drop --trunk resnet_v1.5; "
                        "NVIDIA's or torchvision's ResNet-50: convert it with "
                        "resnet50v1.5/import_weights.py first)")
    n = load_resnet_trunk(model, prefix, arch, padding)
    return f"initialised {n} trunk layers from {prefix}: ResNet-50 v1.5 (padding {padding})"


# The trunk's weight sources, one entry each (--trunk): its reader, by its own names.
TRUNK_SOURCES = {"resnet_v1": _from_slim, "resnet_v1.5": _from_resnet}


def load_trunk(model: keras.Model, path: str, arch: str, trunk: str, padding: str) -> str:
    """Initialises ``model``'s trunk from the checkpoint at ``path`` (``--trunk``'s source);
    returns a line saying what was loaded."""
    return TRUNK_SOURCES[trunk](model, path, arch, padding)
