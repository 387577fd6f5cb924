"""Ground truth -> per-anchor training targets: TF-OD's argmax matcher and SSD target assigner.

IoU >= 0.5 is a match and anything lower is background (no ignore band). Each ground-truth box is
also forced onto its best anchor, whatever the IoU (``force_match_for_each_row``); when two boxes
share a best anchor, the first box wins, as ``tf.argmax`` decides in TF-OD. Targets per anchor:
the matched box's class id (0: background) and its box code (zeros where unmatched).
"""
from __future__ import annotations

import tensorflow as tf

from ssd import box_coder

MATCH_THRESHOLD = 0.5


def match(gt_boxes, num_gt, anchors, threshold: float = MATCH_THRESHOLD):
    """(A,) int32: index of the ground-truth box matched to each anchor, -1 for background.

    ``gt_boxes`` (G, 4) holds ``num_gt`` real boxes followed by padding."""
    g = tf.shape(gt_boxes)[0]
    valid = tf.range(g) < num_gt  # (G,)
    sim = tf.where(valid[:, None], box_coder.iou(gt_boxes, anchors), -1.0)  # (G, A)
    best_gt = tf.argmax(sim, axis=0, output_type=tf.int32)  # (A,)
    matches = tf.where(tf.reduce_max(sim, axis=0) >= threshold, best_gt, -1)
    # Forced matches: each real box claims its best anchor.
    best_anchor = tf.argmax(sim, axis=1, output_type=tf.int32)  # (G,)
    claims = tf.one_hot(best_anchor, tf.shape(anchors)[0], dtype=tf.int32) * tf.cast(
        valid[:, None], tf.int32)  # (G, A)
    claimed = tf.reduce_max(claims, axis=0) > 0
    claimant = tf.argmax(claims, axis=0, output_type=tf.int32)  # first box with a claim
    return tf.where(claimed, claimant, matches)


def encode_targets(gt_boxes, gt_classes, num_gt, anchors):
    """(classes (A,) int32 with 0 for background, box codes (A, 4) float32) for one image."""
    matches = match(gt_boxes, num_gt, anchors)
    matched = matches >= 0
    safe = tf.maximum(matches, 0)
    classes = tf.where(matched, tf.gather(tf.cast(gt_classes, tf.int32), safe), 0)
    codes = box_coder.encode(tf.gather(gt_boxes, safe), anchors)
    codes = tf.where(matched[:, None], codes, 0.0)
    return classes, codes
