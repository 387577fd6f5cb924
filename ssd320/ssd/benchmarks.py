"""What the benchmark tools (``benchtools/``) ask of SSD320: they stand above the models and
reach this module through the model table (``common.models.MODELS``), never by name.

* ``benchtools.peers``: keras-hub's ``RetinaNetObjectDetector`` (ResNet-50 v1, FPN P3-P7,
  320x320, 90 classes), and the forward FLOPs of ours, counted the same way.
* ``benchtools.int8_accuracy``: the generated shapes and the learning check's recipe (the
  ``shapes`` preset), the held-out batches, and COCO AP of an ONNX model on them.
"""
from __future__ import annotations

import glob
import json
import os

import numpy as np

PEER = "keras_hub RetinaNetObjectDetector"
PEER_BATCH = OUR_BATCH = 8
OUR_FLAGS: list[str] = []
METRICS = ("AP", "AP50", "AP75")


def build_peer(batch: int):
    """(compiled Keras model, one batch, items per step, input spec of one item, items per
    spec): for ``benchtools.peers``, in its environment (keras-hub)."""
    import keras
    import keras_hub
    import tensorflow as tf
    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[7],
        stackwise_num_filters=[64, 128, 256, 512], stackwise_num_blocks=[3, 4, 6, 3],
        stackwise_num_strides=[1, 2, 2, 2], block_type="bottleneck_block",
        use_pre_activation=False, image_shape=(320, 320, 3))
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=encoder, min_level=3, max_level=7, use_p5=False,
        image_shape=(320, 320, 3))
    net = keras_hub.models.RetinaNetObjectDetector(backbone=backbone, num_classes=90,
                                                   bounding_box_format="yxyx")
    net.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9))  # Huber + focal
    gen = tf.random.Generator.from_seed(1)
    corner = gen.uniform((batch, 10, 2), 0, 220)
    boxes = tf.concat([corner, corner + gen.uniform((batch, 10, 2), 20, 100)], -1)
    labels = tf.cast(gen.uniform((batch, 10), 0, 90, tf.int32), tf.float32)
    x = gen.uniform((batch, 320, 320, 3), -1, 1)  # as the preprocessor scales
    return (net, (x, {"boxes": boxes, "labels": labels}), batch,
            tf.TensorSpec((1, 320, 320, 3)), 1)


def forward_flops(batch: int) -> float:
    """Forward FLOPs per image of ours (the graph count ``build_peer``'s are counted by)."""
    import tensorflow as tf

    from common.tools.mfu import graph_flops
    from ssd.model import build_ssd
    net = build_ssd("resnet50", 90, 320)
    return graph_flops(lambda x: net(x, training=False), tf.TensorSpec((1, 320, 320, 3)))


def int8_data(data: str, smoke: bool = False) -> tuple[str, list[str]]:
    """(prepared records under ``data``, main.py's recipe): the learning check's shapes at
    128x128 for 1,800 steps; ``smoke``: a few images at 64x64 for 4 steps."""
    from ssd import shapes
    records = shapes.prepare(data, train=40 if smoke else 600, val=8 if smoke else 100)
    recipe = ["--preset", "shapes", "--image_size", "128", "--iter_unit", "batch",
              "--num_iter", "1800", "--seed", "1"]
    if smoke:
        recipe += ["--image_size", "64", "--batch_size", "4", "--lr_warmup_steps", "2",
                   "--num_iter", "4"]
    return records, recipe


def int8_validation(records: str, image_size: int) -> list:
    """The held-out split's batches of 32 through the evaluation's own tf.data pipeline."""
    from ssd import anchors, tfdata_pipeline
    files = sorted(glob.glob(os.path.join(records, "validation-*")))
    with open(os.path.join(records, "label_map.json")) as f:
        classes = json.load(f)["num_classes"]
    data = tfdata_pipeline.dataset(files, 32, image_size, False, anchors.generate(image_size),
                                   classes)
    return [{k: v.numpy() for k, v in b.items() if k in ("images", "image_id", "height",
                                                          "width")} for b in data]


def int8_accuracy(run, files: dict, batches, records: str) -> dict:
    """COCO AP, AP50 and AP75 of each ONNX file (``run(file, images)`` gives its outputs by
    name: the NMS inside ``model.onnx``), by pycocotools."""
    from ssd import coco_eval
    from ssd.exports import TF_OD_NAMES
    gt = coco_eval.ground_truth(os.path.join(records, "validation_annotations.json"))
    out = {}
    for name, f in files.items():
        parts = []
        for b in batches:
            named = run(f, b["images"], named=True)  # TF-OD's names -> postprocess.nms's
            parts.append({**{k: named[v] for k, v in TF_OD_NAMES.items()},
                          "image_id": b["image_id"], "height": b["height"],
                          "width": b["width"]})
        merged = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
        stats = coco_eval.evaluate(gt, coco_eval.to_coco(merged), merged["image_id"])
        out[name] = {k: float(stats[k]) for k in METRICS}
        out[name]["images"] = int(len(merged["image_id"]))
    return out
