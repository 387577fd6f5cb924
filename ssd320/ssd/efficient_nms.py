"""TensorRT's EfficientNMS plugin on SSD320's graph before NMS: ``attach`` (what
``ssd320/scripts/attach_efficient_nms.py`` runs, and the export's ``ssd320_tensorrt`` models
are built from). The plugin's settings are SSD320's post-processing (``postprocess``); its
class indexes become category ids (plus one: the background column is not in the scores), and
its int32 ``num_detections`` and ``detection_classes`` float32, so that the engine's outputs
are the SavedModel's and ``model.onnx``'s (TF Object Detection API's types).
"""
from __future__ import annotations

import numpy as np

from common.errors import DataError, one_line
from common.files import write_atomically
from ssd import postprocess

DOMAIN = "trt.plugins"
OUTPUTS = ("num_detections", "detection_boxes", "detection_scores", "detection_classes")


def attach(src: str, dst: str, score_threshold: float = postprocess.SCORE_THRESHOLD,
           iou_threshold: float = postprocess.IOU_THRESHOLD,
           max_detections: int = postprocess.MAX_TOTAL) -> dict:
    """Writes ``dst``: ``src`` with the plugin node as its end; returns the node's attributes."""
    import onnx
    import onnx_graphsurgeon as gs

    try:
        graph = gs.import_onnx(onnx.load(src))
    except Exception as e:  # protobuf's DecodeError, onnx's and graphsurgeon's own
        raise DataError(f"{src} is not a whole ONNX model ({one_line(str(e)) or type(e).__name__})"
                        ) from None
    by_name = {t.name: t for t in graph.outputs}
    missing = {"decoded_boxes", "class_scores"} - set(by_name)
    if missing:
        raise ValueError(f"{src} has no output {', '.join(sorted(missing))}: give the "
                         "model_before_nms.onnx that --export_onnx writes")
    boxes, scores = by_name["decoded_boxes"], by_name["class_scores"]
    batch = boxes.shape[0] if boxes.shape and boxes.shape[0] not in (None, -1) else "batch"
    attrs = {"plugin_version": "1", "background_class": -1, "max_output_boxes": max_detections,
             "score_threshold": float(score_threshold), "iou_threshold": float(iou_threshold),
             "score_activation": 0, "class_agnostic": 0, "box_coding": 0}
    outputs = [gs.Variable("num_detections", np.float32, [batch, 1]),
               gs.Variable("detection_boxes", np.float32, [batch, max_detections, 4]),
               gs.Variable("detection_scores", np.float32, [batch, max_detections]),
               gs.Variable("detection_classes", np.float32, [batch, max_detections])]
    count = gs.Variable("detection_count", np.int32, [batch, 1])
    index = gs.Variable("detection_class_index", np.int32, [batch, max_detections])
    category = gs.Variable("detection_category", np.int32, [batch, max_detections])
    graph.nodes.append(gs.Node(op="EfficientNMS_TRT", name="efficient_nms", attrs=attrs,
                               inputs=[boxes, scores], outputs=[count, *outputs[1:3], index],
                               domain=DOMAIN))
    graph.nodes.append(gs.Node(op="Add", name="category_ids", inputs=[
        index, gs.Constant("one", np.array(1, np.int32))], outputs=[category]))
    float32 = int(onnx.TensorProto.FLOAT)
    graph.nodes.append(gs.Node(op="Cast", name="classes_as_float", attrs={"to": float32},
                               inputs=[category], outputs=[outputs[3]]))
    graph.nodes.append(gs.Node(op="Cast", name="count_as_float", attrs={"to": float32},
                               inputs=[count], outputs=[outputs[0]]))
    graph.outputs = outputs
    graph.cleanup().toposort()
    model = gs.export_onnx(graph)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid(DOMAIN, 1))
    onnx.checker.check_model(model)
    write_atomically(dst, model.SerializeToString())
    return attrs
