"""ResNet-50's export: what a client sends and gets back.

``serving_default`` takes what a client has, encoded images (JPEG, PNG, BMP or GIF bytes, any
size), and prepares each as evaluation does (``tfdata_pipeline.eval_image``: decode, shorter
side to size / 0.875, central crop, ImageNet normalisation; or the imported weights' own
recipe, ``--eval_preprocessing``); ``preprocessed`` takes the float
(N, size, size, 3) batch the network itself takes, the input of the ONNX file and of TensorRT.
Both return ``logits`` and ``probabilities`` (N, classes) float32 and ``classes`` (N,) int32,
each image's most probable class (0-based: the line of ``assets/labels.txt``);
``serving_default`` also ``valid`` (N,) bool: False for an image that could not be decoded,
whose other outputs are zeros (``classes`` -1) while the rest of the batch is answered.
"""
from __future__ import annotations

import os
import re

import numpy as np
import tensorflow as tf

from common import graph
from common.data.images import image_input_info, read_image
from common.export.module import Exports, ExportSpec, prepare_each
from common.models import MODELS
from rn50 import tfdata_pipeline


class ResNetExports(Exports):
    export = ExportSpec(onnx_files={"model.onnx": "preprocessed"}, onnx_for_triton=True,
                        int8=True, triton_name="resnet50")

    @property
    def prepare_image(self):
        """Evaluation's preparation (``--eval_preprocessing``: NVIDIA's or the imported
        weights' own recipe)."""
        prep = self.task.eval_prep
        return lambda encoded, size: tfdata_pipeline.eval_image(encoded, size, prep)

    def signatures(self, model):
        size = self.flags.image_size

        def outputs(images):
            logits = tf.cast(model(images, training=False), tf.float32)
            return {"logits": logits, "probabilities": tf.nn.softmax(logits),
                    "classes": tf.argmax(logits, axis=-1, output_type=tf.int32)}

        @graph.function(input_signature=[tf.TensorSpec([None, size, size, 3], tf.float32,
                                                    name="images")])
        def preprocessed(images):
            return outputs(images)

        @graph.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
        def encoded(images):
            batch, valid = prepare_each(images, self.prepare_image, size)
            out = outputs(batch)
            zero = tf.zeros_like(out["logits"])
            return {"logits": tf.where(valid[:, None], out["logits"], zero),
                    "probabilities": tf.where(valid[:, None], out["probabilities"], zero),
                    "classes": tf.where(valid, out["classes"], -1), "valid": valid}
        return {"serving_default": encoded, "preprocessed": preprocessed}

    def assets(self):
        names = self.task.class_names
        return {"labels.txt": "".join(n + "\n" for n in names)} if names else {}

    def client_info(self):
        f = self.flags
        prep = self.task.eval_prep
        described = prep.describe()
        described["resize_shorter_side"] = prep.resize_for(f.image_size)
        return {**image_input_info(f.image_size), **described, "num_classes": f.num_classes,
                "labels": "labels.txt" if self.task.class_names else None,
                "data": _data_read(f.data_dir, self.task.name)}

    def serving_call(self, inputs, state):
        return "preprocessed", inputs

    # --- what inference is --------------------------------------------------------------
    def predict_file(self, model, path):
        f = self.flags
        read_image(path)  # a file that is no image: one line naming it
        x = tfdata_pipeline.eval_image(tf.io.read_file(path), f.image_size,
                                       self.task.eval_prep)[None]
        probs = tf.nn.softmax(model(x, training=False)[0]).numpy()
        top = np.argsort(-probs)[:5]
        rec = {"file": path, "top5_classes": [int(c) for c in top],
               "top5_probs": [round(float(probs[c]), 5) for c in top]}
        if self.task.class_names:
            rec["top5_names"] = [self.task.class_names[c] for c in top]
        names = rec.get("top5_names") or [f"class {c}" for c in rec["top5_classes"]]
        return [(rec, f"{path}: " + ", ".join(f"{name} {p:.3f}" for name, p in
                                              zip(names, rec["top5_probs"])))]


def _data_read(data_dir, model):
    """ImageNet-1k when the data's ``labels.txt`` (prepare_dataset.py's, the class
    folders' names) holds its 1,000 WordNet ids; else the classes it holds."""
    if not data_dir:
        return None
    path = os.path.join(data_dir, "labels.txt")
    names = open(path, encoding="utf-8").read().split() if os.path.isfile(path) else []
    if len(names) == 1000 and all(re.fullmatch(r"n\d{8}", n) for n in names):
        return {"dataset": MODELS[model].dataset,
                "description": "ImageNet-1k (ILSVRC2012)"}
    if names:
        shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        return {"dataset": None,
                "description": f"an image dataset of {len(names)} classes ({shown})"}
    return None
