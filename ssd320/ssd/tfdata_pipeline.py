"""SSD320's input pipeline in tf.data (the DALI pipeline feeds the same ``finish`` step).

Training, in TF-OD's order: decode, random horizontal flip (p 0.5, boxes flipped), random crop
(``sample_distorted_bounding_box``: area 0.75-1, aspect 0.75-3, always applied; boxes wholly
outside the crop dropped, the rest clipped), bilinear resize to ``image_size`` (aspect not
kept), normalise. Evaluation: decode, resize, normalise. Then ``finish``: boxes padded to 100 and
encoded against the anchors (``targets.encode_targets``). Elements are dicts: ``images``
(S, S, 3) float32, ``cls`` (A,) int64, ``box`` (A, 4) float32, ``image_id``, ``height``,
``width`` (the original size, to put detections back into its pixels).
"""
from __future__ import annotations

import tensorflow as tf

from common import graph
from common.data import record_reader
from common.data.images import decode, normalize
from common.data.input_errors import checked_range
from ssd import targets
from ssd.config import MAX_BOXES

CROP_AREA, CROP_ASPECT = (0.75, 1.0), (0.75, 3.0)
_BOX_KEYS = ("ymin", "xmin", "ymax", "xmax")


def parse(record, num_classes: int) -> dict:
    """The record's fields; fails on a class id outside 1..num_classes, an inverted box or more
    than MAX_BOXES boxes."""
    features = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
                "image/height": tf.io.FixedLenFeature([], tf.int64),
                "image/width": tf.io.FixedLenFeature([], tf.int64),
                "image/id": tf.io.FixedLenFeature([], tf.int64),
                "image/object/class/label": tf.io.VarLenFeature(tf.int64)}
    features.update({f"image/object/bbox/{k}": tf.io.VarLenFeature(tf.float32) for k in _BOX_KEYS})
    ex = tf.io.parse_single_example(record, features)
    boxes = tf.stack([tf.sparse.to_dense(ex[f"image/object/bbox/{k}"]) for k in _BOX_KEYS], -1)
    classes = checked_range(
        tf.cast(tf.sparse.to_dense(ex["image/object/class/label"]), tf.int32), 1, num_classes,
        "class")
    bad_box = (tf.reduce_any((boxes[:, 2] < boxes[:, 0]) | (boxes[:, 3] < boxes[:, 1]))
               | tf.reduce_any((boxes < 0) | (boxes > 1)))
    box_check = tf.debugging.Assert(tf.logical_not(bad_box), [tf.strings.format(
        "a box is inverted or outside 0..1: {}", boxes, summarize=8)])
    # prepare_dataset.py keeps at most MAX_BOXES; DALI refuses more too (its padding).
    count_check = tf.debugging.Assert(tf.shape(boxes)[0] <= MAX_BOXES, [tf.strings.format(
        "the image has {} boxes, more than " + str(MAX_BOXES), tf.shape(boxes)[0])])
    with tf.control_dependencies([box_check, count_check]):
        boxes = tf.identity(boxes)
    return {"encoded": ex["image/encoded"], "boxes": boxes, "classes": classes,
            "image_id": ex["image/id"], "height": ex["image/height"], "width": ex["image/width"]}


def record_check(num_classes: int):
    """What a record must pass (for common.data.input_errors): it parses and its image decodes."""
    def check(record):
        ex = parse(record, num_classes)
        return tf.shape(decode(ex["encoded"])), ex["classes"]
    return check


def flip(image, boxes):
    ymin, xmin, ymax, xmax = tf.unstack(boxes, axis=-1)
    return tf.image.flip_left_right(image), tf.stack([ymin, 1 - xmax, ymax, 1 - xmin], -1)


def random_crop(image, boxes, classes, seed):
    begin, size, window = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.zeros([1, 0, 4]), seed=seed, min_object_covered=0.0,
        aspect_ratio_range=CROP_ASPECT, area_range=CROP_AREA, max_attempts=100,
        use_image_if_no_bounding_boxes=True)
    wy0, wx0, wy1, wx1 = tf.unstack(window[0, 0])
    inside = ((boxes[:, 0] < wy1) & (boxes[:, 2] > wy0) & (boxes[:, 1] < wx1) & (boxes[:, 3] > wx0))
    boxes, classes = tf.boolean_mask(boxes, inside), tf.boolean_mask(classes, inside)
    scale = tf.stack([wy1 - wy0, wx1 - wx0, wy1 - wy0, wx1 - wx0])
    boxes = tf.clip_by_value((boxes - tf.stack([wy0, wx0, wy0, wx0])) / scale, 0.0, 1.0)
    return tf.slice(image, begin, size), boxes, classes


def finish(image, boxes, classes, ex, anchors) -> dict:
    """Pads the boxes to MAX_BOXES and encodes the per-anchor targets."""
    n = tf.minimum(tf.shape(boxes)[0], MAX_BOXES)
    pad = MAX_BOXES - n
    boxes = tf.pad(boxes[:n], [[0, pad], [0, 0]])
    classes = tf.pad(classes[:n], [[0, pad]])
    cls, box = targets.encode_targets(boxes, classes, n, anchors)
    return {"images": image, "cls": cls, "box": box, "image_id": ex["image_id"],
            "height": ex["height"], "width": ex["width"]}


def preprocess(ex, image_size: int, anchors, seed=None):
    """Training with ``seed`` ((2,) int64, the stateless ops' seed: common/data/record_reader.py),
    evaluation without."""
    image, boxes, classes = decode(ex["encoded"]), ex["boxes"], ex["classes"]
    if seed is not None:
        flip_seed, crop_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
        image, boxes = tf.cond(tf.random.stateless_uniform([], flip_seed) < 0.5,
                               lambda: flip(image, boxes), lambda: (image, boxes))
        image, boxes, classes = random_crop(image, boxes, classes, crop_seed)
    return finish(resize_normalize(image, image_size), boxes, classes, ex, anchors)


def resize_normalize(image, image_size: int):
    """Bilinear resize to (image_size, image_size), the aspect not kept, then normalised: the
    last step of training's and evaluation's preprocessing, and of predict's and serving's."""
    return normalize(tf.image.resize(image, (image_size, image_size), method="bilinear"))


def eval_image(encoded, image_size: int):
    """An encoded image as evaluation prepares it (the exports' ``serving_default`` too)."""
    return resize_normalize(decode(encoded), image_size)


def dataset(files, batch_size: int, image_size: int, training: bool, anchors, num_classes: int,
            rank: int = 0, world: int = 1, seed: int | None = None) -> tf.data.Dataset:
    """Batches of the dicts above for this rank; training repeats, evaluation is one pass."""
    anchors = tf.constant(anchors)
    ds = record_reader.rank_records(files, training, rank, world, seed, shuffle_buffer=2048)
    if training:
        ds = graph.dataset_map(
            record_reader.element_seeds(ds, seed),
            lambda r, s: preprocess(parse(r, num_classes), image_size, anchors, s),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=record_reader.keeps_order(
                training, seed))
    else:
        ds = graph.dataset_map(
            ds, lambda r: preprocess(parse(r, num_classes), image_size, anchors),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)
