"""Box codes and logits -> final detections: sigmoid, drop the background column, decode, clip
to the image, then per-class NMS (IoU 0.6, score > 1e-8, 100 per class, 100 in all), all in
float32. ``tf.image.combined_non_max_suppression`` is TF-OD's batch multiclass NMS for one box
per anchor shared by every class."""
from __future__ import annotations

import tensorflow as tf

from ssd import box_coder

IOU_THRESHOLD, SCORE_THRESHOLD, MAX_PER_CLASS, MAX_TOTAL = 0.6, 1e-8, 100, 100


def decode(cls_logits, box_codes, anchors):
    """Every anchor's box (B, A, 4), normalised (ymin, xmin, ymax, xmax) and clipped to the
    image, and its class scores (B, A, C) (sigmoid, background excluded): what NMS takes."""
    scores = tf.sigmoid(tf.cast(cls_logits, tf.float32))[:, :, 1:]
    boxes = tf.clip_by_value(box_coder.decode(box_codes, anchors[None]), 0.0, 1.0)
    return boxes, scores


def nms(boxes, scores, max_per_class: int = MAX_PER_CLASS, max_total: int = MAX_TOTAL):
    """``decode``'s boxes and scores -> a dict of boxes (B, 100, 4), scores (B, 100), classes
    (B, 100) int32 category ids (1-based, background excluded) and num_detections (B,)."""
    out = tf.image.combined_non_max_suppression(
        boxes[:, :, None, :], scores, max_output_size_per_class=max_per_class,
        max_total_size=max_total, iou_threshold=IOU_THRESHOLD, score_threshold=SCORE_THRESHOLD,
        pad_per_class=False, clip_boxes=True)
    return {"boxes": out.nmsed_boxes, "scores": out.nmsed_scores,
            "classes": tf.cast(out.nmsed_classes, tf.int32) + 1,
            "num_detections": out.valid_detections}


def detect(cls_logits, box_codes, anchors, max_per_class: int = MAX_PER_CLASS,
           max_total: int = MAX_TOTAL):
    """``nms`` of ``decode``: the post-NMS detections of the heads' outputs."""
    return nms(*decode(cls_logits, box_codes, anchors), max_per_class, max_total)
