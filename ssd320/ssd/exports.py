"""SSD320's export: what a client sends and gets back.

``serving_default`` takes encoded images (JPEG, PNG, BMP or GIF bytes, any size) and prepares
each as evaluation does (``tfdata_pipeline.eval_image``: decode, bilinear resize to
``image_size`` without keeping the aspect, ImageNet normalisation); ``preprocessed`` takes the
float (N, size, size, 3) batch the network takes (the input of ``model.onnx``). Both return
the post-NMS detections under TF Object Detection API's names: ``detection_boxes`` (N, 100, 4)
normalised (ymin, xmin, ymax, xmax) of the image as sent (the resize keeps no aspect, so they
scale by its own height and width), ``detection_scores`` (N, 100), ``detection_classes``
(N, 100) category ids (``assets/label_map.json``'s) and ``num_detections`` (N,), the rows that
hold a detection, both float32 as TF Object Detection API's exports give them (so that a Triton
config or client written for those fits); ``serving_default`` also ``valid`` (N,) bool: False for an
image that could not be decoded, which gets no detections while the rest of the batch is
answered. ``decoded`` returns what NMS takes, every anchor's clipped box
``decoded_boxes`` (N, A, 4) and class scores ``class_scores`` (N, A, C): the input of
TensorRT's EfficientNMS plugin (``model_before_nms.onnx``, ``scripts/attach_efficient_nms.py``).
"""
from __future__ import annotations

import json
import os

import tensorflow as tf

from common import graph
from common.data.images import image_input_info, read_image
from common.export.module import Exports, ExportSpec, prepare_each
from common.models import MODELS
from ssd import postprocess, tfdata_pipeline

# postprocess.nms's keys -> TF Object Detection API's output names.
TF_OD_NAMES = {"boxes": "detection_boxes", "scores": "detection_scores",
               "classes": "detection_classes", "num_detections": "num_detections"}


class SSDExports(Exports):
    export = ExportSpec(onnx_files={"model.onnx": "preprocessed",
                                    "model_before_nms.onnx": "decoded"},
                        onnx_for_triton=True, int8=True, triton_name="ssd320",
                        triton_max_batch_size=32,
                        # TensorRT builds ssd320_tensorrt from the graph before NMS with
                        # TensorRT's EfficientNMS on it, not from model.onnx's ONNX
                        # NonMaxSuppression.
                        tensorrt_onnx="model_before_nms.onnx",
                        tensorrt_rewrite="ssd.efficient_nms:attach")
    inference_input = "images"
    prepare_image = staticmethod(tfdata_pipeline.eval_image)

    def signatures(self, model):
        size = self.flags.image_size
        anchors = tf.constant(self.task.anchors)
        spec = tf.TensorSpec([None, size, size, 3], tf.float32, name="images")

        @graph.function(input_signature=[spec])
        def decoded(images):
            out = model(images, training=False)
            boxes, scores = postprocess.decode(out["cls_logits"], out["box_codes"], anchors)
            return {"decoded_boxes": boxes, "class_scores": scores}

        @graph.function(input_signature=[spec])
        def preprocessed(images):
            d = decoded(images)
            found = postprocess.nms(*postprocess.top_candidates(d["decoded_boxes"],
                                                                d["class_scores"]))
            return {TF_OD_NAMES[k]: tf.cast(v, tf.float32) for k, v in found.items()}

        @graph.function(input_signature=[tf.TensorSpec([None], tf.string, name="images")])
        def encoded(images):
            batch, valid = prepare_each(images, self.prepare_image, size)
            found = preprocessed(batch)
            kept = {k: tf.where(tf.reshape(valid, [-1] + [1] * (len(v.shape) - 1)), v,
                                tf.zeros_like(v)) for k, v in found.items()}
            return {**kept, "valid": valid}
        return {"serving_default": encoded, "preprocessed": preprocessed, "decoded": decoded}

    def assets(self):
        found = self.task.known_label_map  # the data's, else the checkpoint's
        return {"label_map.json": json.dumps(found, indent=1) + "\n"} if found else {}

    def client_info(self):
        f = self.flags
        # NVIDIA's evaluation preprocessing, the one SSD320 has (the card's recipe).
        return {**image_input_info(f.image_size), "recipe": "nvidia",
                "resize": "bilinear, aspect not kept",
                "boxes": "ymin, xmin, ymax, xmax; normalised to the image as sent",
                "num_classes": f.num_classes,
                "score_threshold": f.score_threshold,
                "label_map": "label_map.json" if self.task.names else None,
                "data": _data_read(f.data_dir, self.task.name)}

    def serving_call(self, inputs, state):
        return "preprocessed", inputs

    _detect = None  # predict's compiled detection, made at its first file

    # --- what inference is --------------------------------------------------------------
    def predict_file(self, model, path):
        """Detections above --score_threshold in the image's pixels, and a PNG drawing of them
        in ``<results_dir>/predictions/``, named after the file (``a.jpg`` -> ``a.jpg.png``;
        ``-2``, ``-3`` ... when two inputs share a name, so no drawing replaces another)."""
        from ssd.draw import draw_detections

        f = self.flags
        if self._detect is None:  # compiled at the first file
            self._detect = graph.function(lambda x: self.task.detect(model, x))
            self._drawn = set()
        image = read_image(path)
        h, w = int(image.shape[0]), int(image.shape[1])
        x = tfdata_pipeline.resize_normalize(image, f.image_size)
        det = {k: v[0].numpy() for k, v in self._detect(x[None]).items()}
        keep = [k for k in range(int(det["num_detections"]))
                if det["scores"][k] >= f.score_threshold]
        boxes = [[round(float(v), 2) for v in det["boxes"][k] * [h, w, h, w]] for k in keep]
        classes = [int(det["classes"][k]) for k in keep]
        rec = {"file": path, "boxes_ymin_xmin_ymax_xmax": boxes, "classes": classes,
               "names": [self.task.names.get(c, str(c)) for c in classes],
               "scores": [round(float(det["scores"][k]), 4) for k in keep]}
        out_dir = os.path.join(f.results_dir, "predictions")
        os.makedirs(out_dir, exist_ok=True)
        name, n = os.path.basename(path), 1
        while (drawn := f"{name}.png" if n == 1 else f"{name}-{n}.png") in self._drawn:
            n += 1
        self._drawn.add(drawn)
        rec["drawn"] = os.path.join(out_dir, drawn)
        draw_detections(image.numpy(), rec, rec["drawn"])
        found = ", ".join(f"{n} {s:.2f}" for n, s in zip(rec["names"], rec["scores"]))
        return [(rec, f"{path}: {len(rec['scores'])} detection(s) above {f.score_threshold}"
                      f"{': ' + found if found else ''} (drawn: {rec['drawn']})")]


def _data_read(data_dir, model):
    """COCO 2017 when the data's ``label_map.json`` (prepare_dataset.py's, from the
    annotations) holds COCO's 80 categories, ``person`` 1 to ``toothbrush`` 90; else the
    categories it holds."""
    path = os.path.join(data_dir or "", "label_map.json")
    if not data_dir or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        found = {int(c["id"]): c["name"] for c in json.load(f).get("categories", [])}
    if len(found) == 80 and found.get(1) == "person" and found.get(90) == "toothbrush":
        return {"dataset": MODELS[model].dataset, "description": "COCO 2017"}
    names = [found[k] for k in sorted(found)]
    shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
    return {"dataset": None,
            "description": f"a detection dataset of {len(names)} categories ({shown})"}
