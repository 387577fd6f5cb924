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
    """(..., A) int64: index of the ground-truth box matched to each anchor, -1 for background.

    ``gt_boxes`` (..., G, 4) holds ``num_gt`` (...) real boxes followed by padding: one image,
    or a batch of them (in the compiled step, for batches DALI leaves on the GPU). Indices are
    int64: a GPU's int32 kernels (comparisons, scatters, ranges) read host memory, and the
    batch's matching would be copied to the host and back (common/tools/gpu_placement.py)."""
    g, a = gt_boxes.shape[-2], anchors.shape[0]
    g = tf.shape(gt_boxes, out_type=tf.int64)[-2] if g is None else g
    valid = tf.range(g, dtype=tf.int64) < tf.cast(num_gt, tf.int64)[..., None]  # (..., G)
    sim = tf.where(valid[..., None], box_coder.iou(gt_boxes, anchors), -1.0)  # (..., G, A)
    best_gt = tf.argmax(sim, axis=-2, output_type=tf.int64)  # (..., A)
    matches = tf.where(tf.reduce_max(sim, axis=-2) >= threshold, best_gt, -1)
    # Forced matches: each real box claims its best anchor; of boxes with the same best anchor
    # the first wins (the smallest index: a scatter-min of each box's index into its anchor).
    best_anchor = tf.argmax(sim, axis=-1, output_type=tf.int64)  # (..., G)
    flat_anchor = tf.reshape(best_anchor, [-1])
    images = tf.size(flat_anchor, out_type=tf.int64) // g  # 1 for one image
    image = tf.repeat(tf.range(images), g)
    box = tf.tile(tf.range(g, dtype=tf.int64), [images])
    claimant = tf.tensor_scatter_nd_min(
        tf.fill(tf.stack([images, a]), tf.cast(g, tf.int64)),
        tf.stack([image, flat_anchor], axis=1),
        tf.where(tf.reshape(valid, [-1]), box, g))  # (images, A); g: no claim
    claimant = tf.reshape(claimant, tf.shape(matches))
    return tf.where(claimant < g, claimant, matches)


def encode_targets(gt_boxes, gt_classes, num_gt, anchors):
    """(classes (..., A) int64 with 0 for background, box codes (..., A, 4) float32) for one
    image, or a batch (``gt_boxes`` (..., G, 4), ``gt_classes`` (..., G), ``num_gt`` (...))."""
    matches = match(gt_boxes, num_gt, anchors)
    matched = matches >= 0
    safe = tf.maximum(matches, 0)
    batch_dims = len(matches.shape) - 1
    classes = tf.where(matched, tf.gather(tf.cast(gt_classes, tf.int64), safe,
                                          batch_dims=batch_dims), 0)
    codes = box_coder.encode(tf.gather(gt_boxes, safe, batch_dims=batch_dims), anchors)
    codes = tf.where(matched[..., None], codes, 0.0)
    return classes, codes
