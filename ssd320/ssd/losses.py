"""SSD320 v1.2's loss: sigmoid focal loss plus Huber box loss, normalised by the matches.

* Classification: focal loss (alpha 0.25, gamma 2) on every logit of every anchor, including the
  background column 0, whose target is always 0; summed, then divided by N, the number of matched
  anchors in this process's batch (at least 1).
* Localisation: Huber (delta 1) over the 4 box codes of matched anchors, summed, divided by 4N
  (TF-OD's ``normalize_loc_loss_by_codesize``).
All in float32 whatever the compute precision of the model.
"""
from __future__ import annotations

import tensorflow as tf

ALPHA, GAMMA = 0.25, 2.0


def focal_loss(labels, logits, alpha: float = ALPHA, gamma: float = GAMMA):
    """Element-wise sigmoid focal loss (same shape as ``logits``)."""
    labels, logits = tf.cast(labels, tf.float32), tf.cast(logits, tf.float32)
    ce = tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits)
    p = tf.sigmoid(logits)
    p_t = labels * p + (1 - labels) * (1 - p)
    weight = labels * alpha + (1 - labels) * (1 - alpha)
    return tf.pow(1.0 - p_t, gamma) * weight * ce


def huber(x, delta: float = 1.0):
    ax = tf.abs(x)
    return tf.where(ax < delta, 0.5 * tf.square(x), delta * (ax - 0.5 * delta))


def detection_loss(cls_logits, box_codes, target_classes, target_codes):
    """(total, classification, localisation, matches) for a batch.

    cls_logits (B, A, C + 1), box_codes (B, A, 4), target_classes (B, A) int, target_codes
    (B, A, 4)."""
    num_columns = cls_logits.shape[-1]
    onehot = tf.one_hot(target_classes, num_columns)  # background rows -> column 0 ...
    onehot = onehot * tf.constant([0.0] + [1.0] * (num_columns - 1))  # ... which stays 0
    matched = tf.cast(target_classes > 0, tf.float32)
    n = tf.maximum(tf.reduce_sum(matched), 1.0)
    cls = tf.reduce_sum(focal_loss(onehot, cls_logits)) / n
    loc = tf.reduce_sum(huber(tf.cast(box_codes, tf.float32) - target_codes)
                        * matched[..., None]) / (4.0 * n)
    return cls + loc, cls, loc, tf.reduce_sum(matched)
