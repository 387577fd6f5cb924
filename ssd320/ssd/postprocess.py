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
    boxes, top, cls = _candidates(boxes, scores, k)
    return boxes, tf.one_hot(cls, scores.shape[2], dtype=scores.dtype) * top[..., None]


def _candidates(boxes, scores, k: int):
    """(boxes (B, k, 4), scores (B, k), classes (B, k) int64 0-based) of each image's ``k``
    highest (anchor, class) scores."""
    anchors, classes = scores.shape[1], scores.shape[2]
    flat = tf.reshape(scores, [tf.shape(scores)[0], anchors * classes])  # (B, A x C)
    top, index = tf.math.top_k(flat, k=min(k, anchors * classes))
    index = tf.cast(index, tf.int64)  # on a GPU int32's division is a host kernel
    anchor, cls = index // classes, index % classes
    return tf.gather(boxes, anchor, batch_dims=1), top, cls


def _iou(box, boxes):
    """IoU (B, K) of one box per image (B, 4) with each image's boxes (B, K, 4), as
    TensorFlow's NMS kernels compute it (corners in any order; an empty box overlaps
    nothing)."""
    def corners(b):
        return (tf.minimum(b[..., 0], b[..., 2]), tf.minimum(b[..., 1], b[..., 3]),
                tf.maximum(b[..., 0], b[..., 2]), tf.maximum(b[..., 1], b[..., 3]))
    y0, x0, y1, x1 = corners(box[:, None, :])
    ys0, xs0, ys1, xs1 = corners(boxes)
    area, areas = (y1 - y0) * (x1 - x0), (ys1 - ys0) * (xs1 - xs0)
    inter = (tf.maximum(tf.minimum(y1, ys1) - tf.maximum(y0, ys0), 0.0)
             * tf.maximum(tf.minimum(x1, xs1) - tf.maximum(x0, xs0), 0.0))
    iou = inter / (area + areas - inter)
    return tf.where((area > 0) & (areas > 0), iou, 0.0)


def greedy_nms(boxes, scores, classes, num_classes: int, max_per_class: int = MAX_PER_CLASS,
               max_total: int = MAX_TOTAL):
    """``nms`` of one class per candidate (``_candidates``), computed on the device in every
    image at once: ``max_total`` rounds, each keeping every image's best live candidate and
    dropping the live ones of its class that overlap it (IoU above ``IOU_THRESHOLD``), and
    the rest of its class once it has ``max_per_class``. Taken in score order across classes,
    that is per-class NMS followed by the best ``max_total`` of what survives, which is what
    ``combined_non_max_suppression`` returns; that kernel runs on the CPU only, so a GPU
    evaluating with it copied every batch's candidates to the host. A loop of fixed length:
    its counter stays on the host and no round waits for the device."""
    k = scores.shape[1]
    live = tf.where(scores > SCORE_THRESHOLD, scores, -1.0)  # (B, K); dead: -1

    def round_(i, live, counts, chosen, kept):
        best = tf.argmax(live, axis=1, output_type=tf.int64)  # (B,)
        ok = tf.gather(live, best, batch_dims=1) > SCORE_THRESHOLD
        cls = tf.gather(classes, best, batch_dims=1)  # (B,)
        of_class = tf.equal(classes, cls[:, None])  # (B, K)
        counts = counts + tf.one_hot(cls, num_classes) * tf.cast(ok, tf.float32)[:, None]
        full = tf.gather(counts, cls, batch_dims=1) >= max_per_class  # (B,)
        drop = of_class & ((_iou(tf.gather(boxes, best, batch_dims=1), boxes) > IOU_THRESHOLD)
                           | full[:, None])
        drop |= tf.one_hot(best, k, on_value=True, off_value=False)
        live = tf.where(drop & ok[:, None], -1.0, live)
        return i + 1, live, counts, chosen.write(i, best), kept.write(i, ok)

    _, _, _, chosen, kept = tf.while_loop(
        lambda i, *_: i < max_total, round_,
        (tf.constant(0), live, tf.zeros([tf.shape(scores)[0], num_classes]),
         tf.TensorArray(tf.int64, max_total), tf.TensorArray(tf.bool, max_total)),
        maximum_iterations=max_total)
    chosen, kept = tf.transpose(chosen.stack()), tf.transpose(kept.stack())  # (B, T)
    on = tf.cast(kept, tf.float32)
    return {"boxes": tf.gather(boxes, chosen, batch_dims=1) * on[..., None],
            "scores": tf.gather(scores, chosen, batch_dims=1) * on,
            # int64, not the kernel's int32: a GPU's int32 kernels run on its host
            "classes": tf.gather(classes, chosen, batch_dims=1) * tf.cast(kept, tf.int64) + 1,
            "num_detections": tf.reduce_sum(tf.cast(kept, tf.int64), axis=1)}


def detect(cls_logits, box_codes, anchors, max_per_class: int = MAX_PER_CLASS,
           max_total: int = MAX_TOTAL, top_k: int = PRE_NMS_TOP_K, on_device: bool = False):
    """The post-NMS detections of the heads' outputs: ``nms`` of ``decode``'s best ``top_k``
    candidates, TF-OD's kernel, as the exports run it (ONNX and TensorRT convert it), or with
    ``on_device`` ``greedy_nms``, computed where the model runs: what evaluation scores. A
    test holds the two equal; where scores tie exactly (an untrained model's, or sigmoids
    rounded to 1.0), either may keep another of the tied boxes, so ``predict`` keeps the
    kernel, whose detections the exports serve."""
    boxes, scores = decode(cls_logits, box_codes, anchors)
    if not on_device:
        return nms(*top_candidates(boxes, scores, top_k), max_per_class, max_total)
    return greedy_nms(*_candidates(boxes, scores, top_k), scores.shape[2], max_per_class,
                      max_total)
