"""What the benchmark tools (``benchtools/``) ask of ResNet-50 v1.5: they stand above the models
and reach this module through the model table (``common.models.MODELS``), never by name.

* ``benchtools.peers``: the Keras model a user would pick instead (``keras.applications``'
  ResNet-50, trained by ``fit``) and the forward FLOPs of ours, counted the same way.
* ``benchtools.int8_accuracy``: the data and recipe it trains on (``make demo``'s digits: the
  ``digits`` preset), the held-out batches, and top-1 / top-5 of an ONNX model on them.
"""
from __future__ import annotations

import glob
import os

import numpy as np

PEER = "keras.applications.ResNet50"
PEER_BATCH = OUR_BATCH = 16  # images per step, each side's default
OUR_FLAGS = ["--arch", "resnet50"]  # main.py's, besides the batch, the steps and the precision
METRICS = ("top1", "top5")  # int8_accuracy's table


def build_peer(batch: int):
    """(compiled Keras model, one batch (x, y), items per step, input spec of one item for the
    FLOP count, items per spec): for ``benchtools.peers``, in its environment."""
    import keras
    import tensorflow as tf
    net = keras.applications.ResNet50(weights=None)
    net.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.875),
                loss=keras.losses.CategoricalCrossentropy())
    x = tf.random.normal((batch, 224, 224, 3))
    y = tf.one_hot(tf.random.uniform((batch,), 0, 1000, tf.int32), 1000)
    return net, (x, y), batch, tf.TensorSpec((1, 224, 224, 3)), 1


def forward_flops(batch: int) -> float:
    """Forward FLOPs per image of ours (the graph count ``build_peer``'s are counted by)."""
    import tensorflow as tf

    from common.tools.mfu import graph_flops
    from rn50.model import build_resnet
    net = build_resnet("resnet50")
    return graph_flops(lambda x: net(x, training=False), tf.TensorSpec((1, 224, 224, 3)))


def int8_data(data: str, smoke: bool = False) -> tuple[str, list[str]]:
    """(prepared records under ``data``, main.py's recipe): the digits at 32x32, ``make
    demo``'s run; ``smoke``: 200 of them on the tiny network for one epoch."""
    from rn50 import digits
    records = digits.prepare(data, limit=200 if smoke else None)
    recipe = ["--preset", "digits", "--image_size", "32", "--seed", "1"]
    if smoke:
        recipe += ["--arch", "resnet_tiny", "--num_iter", "1"]
    return records, recipe


def int8_validation(records: str, image_size: int) -> list:
    """The held-out split's batches of 32 through the evaluation's own tf.data pipeline."""
    from rn50 import eval_preprocessing, tfdata_pipeline
    from rn50.task import read_labels
    files = sorted(glob.glob(os.path.join(records, "validation-*")))
    classes = len(read_labels(records))
    return [(x.numpy(), y.numpy()) for x, y in
            tfdata_pipeline.dataset(files, 32, image_size, False, num_classes=classes,
                                    prep=eval_preprocessing.nvidia(image_size))]  # the recipe's


def int8_accuracy(run, files: dict, batches, records: str) -> dict:
    """Top-1 and top-5 of each ONNX file (``run(file, images, named=True)`` gives its outputs
    by name), and how often INT8's top class agrees with float32's."""
    out, top = {}, {}
    labels = np.concatenate([y for _, y in batches])  # 0-based, as the pipeline gives them
    for name, f in files.items():
        logits = np.concatenate([run(f, x, named=True)["logits"] for x, _ in batches])
        order = np.argsort(-logits, axis=1)
        top[name] = order[:, 0]
        out[name] = {"top1": float(np.mean(order[:, 0] == labels)),
                     "top5": float(np.mean((order[:, :5] == labels[:, None]).any(1))),
                     "images": int(len(labels))}
    out["int8"]["top1_agreement"] = float(np.mean(top["int8"] == top["float32"]))
    return out
