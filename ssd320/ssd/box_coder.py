"""Faster R-CNN box coder (scales 10, 10, 5, 5) and IoU, as TF-OD uses them for SSD.

Targets ``[ty, tx, th, tw] = [10 dy / ha, 10 dx / wa, 5 log(h / ha), 5 log(w / wa)]`` with 1e-8
added to every height and width, i.e. SSD's variances 0.1, 0.1, 0.2, 0.2. Boxes are
(ymin, xmin, ymax, xmax). Everything here runs in float32.
"""
from __future__ import annotations

import tensorflow as tf

SCALES = (10.0, 10.0, 5.0, 5.0)
EPSILON = 1e-8


def _centre_size(boxes):
    ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
    h, w = ymax - ymin + EPSILON, xmax - xmin + EPSILON
    return ymin + 0.5 * (ymax - ymin), xmin + 0.5 * (xmax - xmin), h, w


def encode(boxes, anchors):
    """(..., 4) boxes against (..., 4) anchors -> (..., 4) regression targets."""
    yc, xc, h, w = _centre_size(tf.cast(boxes, tf.float32))
    ya, xa, ha, wa = _centre_size(tf.cast(anchors, tf.float32))
    sy, sx, sh, sw = SCALES
    return tf.stack([sy * (yc - ya) / ha, sx * (xc - xa) / wa,
                     sh * tf.math.log(h / ha), sw * tf.math.log(w / wa)], axis=-1)


def decode(codes, anchors):
    """The inverse of ``encode``."""
    ty, tx, th, tw = tf.unstack(tf.cast(codes, tf.float32), axis=-1)
    ya, xa, ha, wa = _centre_size(tf.cast(anchors, tf.float32))
    sy, sx, sh, sw = SCALES
    h, w = tf.exp(th / sh) * ha, tf.exp(tw / sw) * wa
    yc, xc = ty / sy * ha + ya, tx / sx * wa + xa
    return tf.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)


def iou(a, b):
    """(..., N, 4) x (M, 4) -> (..., N, M) intersection over union (0 where both areas are 0)."""
    a, b = tf.cast(a, tf.float32), tf.cast(b, tf.float32)
    ay0, ax0, ay1, ax1 = (t[..., None] for t in tf.unstack(a, axis=-1))  # (..., N, 1) each
    by0, bx0, by1, bx1 = tf.unstack(b, axis=-1)  # (M,) each
    ih = tf.maximum(tf.minimum(ay1, by1) - tf.maximum(ay0, by0), 0.0)
    iw = tf.maximum(tf.minimum(ax1, bx1) - tf.maximum(ax0, bx0), 0.0)
    inter = ih * iw
    union = (ay1 - ay0) * (ax1 - ax0) + (by1 - by0) * (bx1 - bx0) - inter
    return tf.math.divide_no_nan(inter, union)
