"""Box codes and logits -> final detections: sigmoid, drop the background column, decode, clip
to the image, keep each image's ``PRE_NMS_TOP_K`` highest (anchor, class) scores, then per-class
NMS (IoU 0.6, score > 1e-8, 100 per class, 100 in all), all in float32.
``tf.image.combined_non_max_suppression`` is TF-OD's batch multiclass NMS for one box per anchor
shared by every class.

The cut before NMS is RetinaNet's (torchvision and Detectron keep the top 1,000 candidates per
feature level): ``CombinedNonMaxSuppression`` has a CPU kernel only, and without the cut every
evaluation batch copied all (anchors x classes) scores to the host (a (32, 12804, 90) float32
tensor, 147 MB, at SSD320's recipe) and ran about 2,900 per-class NMS over 12,804 boxes each.
With it the top-k runs on the device and NMS sees (32, 1000, 90) scores that are zero outside
each candidate's class. A detection lost to the cut would rank below the image's 1,000th
(anchor, class) score; ``tests/test_ssd_math.py`` measures how often that changes the 100
detections kept."""
from __future__ import annotations

import tensorflow as tf

from ssd import box_coder

IOU_THRESHOLD, SCORE_THRESHOLD, MAX_PER_CLASS, MAX_TOTAL = 0.6, 1e-8, 100, 100
PRE_NMS_TOP_K = 1000


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


def top_candidates(boxes, scores, k: int = PRE_NMS_TOP_K):
    """Each image's ``k`` highest (anchor, class) scores: their boxes (B, k, 4) and their
    scores as (B, k, C), zero outside the candidate's class, which is what ``nms`` takes."""
    anchors, classes = scores.shape[1], scores.shape[2]
    flat = tf.reshape(scores, [tf.shape(scores)[0], anchors * classes])  # (B, A x C)
    top, index = tf.math.top_k(flat, k=min(k, anchors * classes))
    anchor, cls = index // classes, index % classes
    return (tf.gather(boxes, anchor, batch_dims=1),
            tf.one_hot(cls, classes, dtype=scores.dtype) * top[..., None])


def detect(cls_logits, box_codes, anchors, max_per_class: int = MAX_PER_CLASS,
           max_total: int = MAX_TOTAL, top_k: int = PRE_NMS_TOP_K):
    """``nms`` of ``decode``'s ``top_candidates``: the post-NMS detections of the heads'
    outputs."""
    return nms(*top_candidates(*decode(cls_logits, box_codes, anchors), top_k), max_per_class,
               max_total)
