"""ImageNet-layout TFRecords through tf.data, with the same preprocessing as the DALI pipeline.

Records: ``image/encoded`` (JPEG, or PNG/BMP/GIF, which DALI decodes too) and
``image/class/label`` (1..num_classes), in files named ``train-NNNNN-of-MMMMM`` and
``validation-NNNNN-of-MMMMM``. Labels come out 0-based; a label outside 1..num_classes stops the
run (common/input_errors.py then names the file) instead of becoming an all-zero target.
"""
from __future__ import annotations

import tensorflow as tf

from common import record_reader
from common.images import decode, normalize
from common.input_errors import checked_range
from rn50.config import eval_resize


def parse(record, num_classes: int):
    """(encoded image, 0-based int32 label); fails on a label outside 1..num_classes."""
    ex = tf.io.parse_single_example(record, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    })
    label = checked_range(ex["image/class/label"], 1, num_classes, "label")
    return ex["image/encoded"], tf.cast(label - 1, tf.int32)


def record_check(num_classes: int):
    """What a record must pass: it parses, its label is in range, its image decodes in full."""
    def check(record):
        encoded, label = parse(record, num_classes)
        return tf.shape(decode(encoded)), label
    return check


def train_image(encoded, size: int, seed, min_area: float = 0.08):
    """Random crop (area min_area-100%, aspect 3/4-4/3), resize to size x size, random flip;
    ``seed`` ((2,) int64) decides both (stateless ops: see common/record_reader.py)."""
    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))

    def window(shape):
        begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
            shape, bounding_boxes=tf.zeros([1, 0, 4]), seed=crop_seed, min_object_covered=0.0,
            aspect_ratio_range=(3 / 4, 4 / 3), area_range=(min_area, 1.0), max_attempts=100,
            use_image_if_no_bounding_boxes=True)
        return begin, crop

    def jpeg():  # decodes only the crop: the fast path for the usual case
        begin, crop = window(tf.image.extract_jpeg_shape(encoded))
        return tf.image.decode_and_crop_jpeg(
            encoded, tf.stack([begin[0], begin[1], crop[0], crop[1]]), channels=3)

    def other():
        image = decode(encoded)
        begin, crop = window(tf.shape(image))
        return tf.slice(image, begin, crop)

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image = tf.image.resize(image, (size, size), antialias=True)
    return normalize(tf.image.stateless_random_flip_left_right(image, flip_seed))


def eval_image(encoded, size: int):
    return eval_crop(decode(encoded), size)


def eval_crop(image, size: int):
    """Resize the shorter side to size / 0.875 (256 for 224), then take the central crop."""
    hw = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = eval_resize(size) / tf.reduce_min(hw)
    new_hw = tf.cast(tf.round(hw * scale), tf.int32)
    image = tf.image.resize(image, new_hw, antialias=True)
    # Centre rounded half up, as DALI's crop_pos 0.5 does, so the two pipelines see one crop.
    top, left = (new_hw[0] - size + 1) // 2, (new_hw[1] - size + 1) // 2
    return normalize(image[top:top + size, left:left + size])


def dataset(files, batch_size: int, image_size: int, training: bool, rank: int = 0,
            world: int = 1, seed: int | None = None, min_area: float = 0.08,
            num_classes: int = 1000) -> tf.data.Dataset:
    """Batches of (images (N, size, size, 3) float32, labels (N,) int32) for this rank."""
    ds = record_reader.rank_records(files, training, rank, world, seed)
    if training:
        def preprocess(record, element_seed):
            encoded, label = parse(record, num_classes)
            return train_image(encoded, image_size, element_seed, min_area), label
        ds = record_reader.element_seeds(ds, seed)
    else:
        def preprocess(record):
            encoded, label = parse(record, num_classes)
            return eval_image(encoded, image_size), label
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=record_reader.keeps_order(training, seed))
    return ds.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)
