"""ImageNet-layout TFRecords through tf.data, with the same preprocessing as the DALI pipeline.

Records: ``image/encoded`` (JPEG, or PNG/BMP/GIF, which DALI decodes too) and
``image/class/label`` (1..num_classes), in files named ``train-NNNNN-of-MMMMM`` and
``validation-NNNNN-of-MMMMM``. Labels come out 0-based; a label outside 1..num_classes stops the
run (common/data/input_errors.py then names the file) instead of becoming an all-zero target.
"""
from __future__ import annotations

import tensorflow as tf

from common import graph
from common.data import record_reader
from common.data.images import decode, decode_exact
from common.data.input_errors import checked_range
from rn50 import eval_preprocessing


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


def train_image(encoded, size: int, seed, min_area: float,
                prep: eval_preprocessing.EvalPreprocessing):
    """Random crop (area min_area-100%, aspect 3/4-4/3), resize to size x size, random flip;
    ``seed`` ((2,) int64) decides both (stateless ops: see common/data/record_reader.py); normalised
    by ``prep``'s mean and std (``--eval_preprocessing``: what the weights expect)."""
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
    image = tf.image.stateless_random_flip_left_right(image, flip_seed)
    return normalized(image, prep)


def eval_image(encoded, size: int, prep: eval_preprocessing.EvalPreprocessing):
    """An encoded image prepared as evaluation prepares it (``eval_crop``); a source's recipe
    decodes JPEGs as PIL does (``decode_exact``)."""
    exact = prep.mode != "nvidia"  # NVIDIA's decodes as TensorFlow does
    return eval_crop(decode_exact(encoded) if exact else decode(encoded), size, prep)


def eval_crop(image, size: int, prep: eval_preprocessing.EvalPreprocessing):
    """Evaluation's preparation of a decoded image (``--eval_preprocessing``, required: a
    forgotten recipe is an error, not NVIDIA's), by its mode: NVIDIA's, the shorter side to
    size / 0.875 (256 for 224) and the central crop; a source's as PIL and torchvision do it
    (``_pil_crop``); keras-hub's (``keras_resize``)."""
    prepare = {"nvidia": _nvidia_crop, "crop": _pil_crop, "squash": _pil_crop,
               "aspect": keras_resize, "stretch": keras_resize}[prep.mode]
    return normalized(prepare(image, size, prep), prep)


def normalized(image, prep: eval_preprocessing.EvalPreprocessing):
    """(H, W, 3) float32: each channel less the recipe's mean, over its standard deviation
    (NVIDIA's: ImageNet's, ``common.data.images.normalize``)."""
    return (tf.cast(image, tf.float32) - tf.constant(prep.mean, tf.float32)) / tf.constant(
        prep.std, tf.float32)


def _nvidia_crop(image, size: int, prep: eval_preprocessing.EvalPreprocessing):
    """NVIDIA's: the shorter side to size / 0.875, antialiased, and the central crop."""
    hw = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = prep.resize_for(size) / tf.reduce_min(hw)
    new_hw = tf.cast(tf.round(hw * scale), tf.int32)
    image = tf.image.resize(image, new_hw, antialias=True)
    # Centre rounded half up, as DALI's crop_pos 0.5 does, so the two pipelines see one crop.
    top, left = (new_hw[0] - size + 1) // 2, (new_hw[1] - size + 1) // 2
    return image[top:top + size, left:left + size]


def _pil_crop(image, size: int, r: eval_preprocessing.EvalPreprocessing):
    """A source's recipe as torchvision applies it to a PIL image: the shorter side to the
    recipe's, the longer truncated (``squash``: both sides to the size); pixels rounded to 8
    bits as PIL's resize leaves them; the central crop's offset rounded half to even."""
    short = r.resize_for(size)
    if short is None:
        new_hw = tf.constant([size, size])
    else:
        hw = tf.shape(image)[:2]
        h, w = hw[0], hw[1]
        new_hw = tf.where(h <= w, tf.stack([short, short * w // h]),
                          tf.stack([short * h // w, short]))
    if r.interpolation == "nearest":
        hw = tf.shape(image)[:2]
        resized = tf.gather(tf.gather(image, _pil_nearest(hw[0], new_hw[0]), axis=0),
                            _pil_nearest(hw[1], new_hw[1]), axis=1)
        resized = tf.cast(resized, tf.float32)
    else:  # PIL resamples the width, rounds to 8 bits, then the height: so here
        wide = tf.image.resize(image, tf.stack([tf.shape(image)[0], new_hw[1]]),
                               method=r.interpolation, antialias=r.antialias)
        wide = tf.clip_by_value(tf.round(tf.cast(wide, tf.float32)), 0, 255)
        resized = tf.image.resize(wide, new_hw, method=r.interpolation, antialias=r.antialias)
        resized = tf.clip_by_value(tf.round(tf.cast(resized, tf.float32)), 0, 255)
    if short is not None:
        top = tf.cast(tf.round(tf.cast(new_hw[0] - size, tf.float32) / 2), tf.int32)
        left = tf.cast(tf.round(tf.cast(new_hw[1] - size, tf.float32) / 2), tf.int32)
        resized = resized[top:top + size, left:left + size]
    resized.set_shape([size, size, 3])
    return resized


def keras_resize(image, size: int, r: eval_preprocessing.EvalPreprocessing):
    """``keras.layers.Resizing(size, size, crop_to_aspect_ratio=..., interpolation=...,
    antialias=...)`` on the TensorFlow backend, as keras-hub's ``ImageClassifier.predict``
    applies it (its converter sees the image as floats: Keras' data adapter casts the 8-bit
    array of ``keras.utils.load_img`` first): for ``aspect``, the central region of the output's
    aspect (its height ``int(width * size / size)`` at most the image's, the offsets truncated
    halves), then ``tf.image.resize`` of it, not rounded."""
    image = tf.cast(image, tf.float32)
    if r.mode == "aspect":
        hw = tf.shape(image)[:2]
        side = tf.minimum(hw[0], hw[1])  # a square output: the crop is the shorter side's
        top = tf.cast(tf.cast(hw[0] - side, tf.float32) / 2, tf.int32)
        left = tf.cast(tf.cast(hw[1] - side, tf.float32) / 2, tf.int32)
        image = image[top:top + side, left:left + side]
    resized = tf.image.resize(image, (size, size), method=r.interpolation,
                              antialias=r.antialias)
    resized.set_shape([size, size, 3])
    return resized


def _pil_nearest(size, new):
    """The source rows (or columns) of PIL's nearest-neighbour resize from ``size`` to ``new``:
    PIL steps through the source in float64, adding the scale at each pixel from half of it,
    and the sums' rounding picks a neighbour where the exact centre falls on a pixel's edge
    (``keras.utils.load_img``'s default)."""
    scale = tf.cast(size, tf.float64) / tf.cast(new, tf.float64)
    steps = tf.concat([[scale / 2], tf.fill([new - 1], scale)], 0)
    return tf.minimum(tf.cast(tf.floor(tf.math.cumsum(steps)), tf.int32), size - 1)


def dataset(files, batch_size: int, image_size: int, training: bool, rank: int = 0,
            world: int = 1, seed: int | None = None, min_area: float = 0.08,
            num_classes: int = 1000, *,
            prep: eval_preprocessing.EvalPreprocessing) -> tf.data.Dataset:
    """Batches of (images (N, size, size, 3) float32, labels (N,) int32) for this rank, prepared
    by ``prep`` (the run's recipe: evaluation's crop, and the mean and std of both)."""
    ds = record_reader.rank_records(files, training, rank, world, seed)
    if training:
        def preprocess(record, element_seed):
            encoded, label = parse(record, num_classes)
            return train_image(encoded, image_size, element_seed, min_area, prep), label
        ds = record_reader.element_seeds(ds, seed)
    else:
        def preprocess(record):
            encoded, label = parse(record, num_classes)
            return eval_image(encoded, image_size, prep), label
    ds = graph.dataset_map(ds, preprocess, num_parallel_calls=tf.data.AUTOTUNE,
                           deterministic=record_reader.keeps_order(training, seed))
    return ds.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)
