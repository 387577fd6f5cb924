"""ImageNet-layout TFRecords through tf.data, with the same preprocessing as the DALI pipeline.

Records: ``image/encoded`` (JPEG bytes) and ``image/class/label`` (1..num_classes), in files
named ``train-*`` and ``validation-*``. Labels come out 0-based.
"""
from __future__ import annotations

import glob
import os

import tensorflow as tf

from common.errors import DataError

# ImageNet channel statistics on the 0..255 scale, as in NVIDIA's scripts.
MEAN = (123.68, 116.78, 103.94)
STD = (58.395, 57.12, 57.375)
EVAL_CROP_FRACTION = 0.875  # 224 of 256: resize the shorter side to size / 0.875, then crop


def eval_resize(size: int) -> int:
    return int(round(size / EVAL_CROP_FRACTION))


def record_files(data_dir: str, split: str) -> list[str]:
    """``split`` is "train" or "validation"."""
    files = sorted(f for f in glob.glob(os.path.join(data_dir, f"{split}-*"))
                   if not f.endswith(".idx"))
    if not files:
        raise DataError(f"no {split}-* TFRecord files in {data_dir} "
                        "(prepare them with resnet50v1.5/prepare_dataset.py)")
    return files


def _parse(record):
    ex = tf.io.parse_single_example(record, {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    })
    return ex["image/encoded"], tf.cast(ex["image/class/label"] - 1, tf.int32)


def normalize(image):
    return (tf.cast(image, tf.float32) - MEAN) / STD


def train_image(jpeg, size: int, min_area: float = 0.08):
    """Random crop (area min_area-100%, aspect 3/4-4/3), resize to size x size, random flip."""
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(jpeg), bounding_boxes=tf.zeros([1, 0, 4]),
        min_object_covered=0.0, aspect_ratio_range=(3 / 4, 4 / 3), area_range=(min_area, 1.0),
        max_attempts=100, use_image_if_no_bounding_boxes=True)
    image = tf.image.decode_and_crop_jpeg(
        jpeg, tf.stack([begin[0], begin[1], crop[0], crop[1]]), channels=3)
    image = tf.image.resize(image, (size, size), antialias=True)
    return normalize(tf.image.random_flip_left_right(image))


def eval_image(jpeg, size: int):
    return eval_crop(tf.io.decode_jpeg(jpeg, channels=3), size)


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
            world: int = 1, seed: int | None = None, min_area: float = 0.08) -> tf.data.Dataset:
    """Batches of (images (N, size, size, 3) float32, labels (N,) int32) for this rank."""
    ds = tf.data.Dataset.from_tensor_slices(list(files))
    shard_files = len(files) >= world
    if shard_files:
        ds = ds.shard(world, rank)
    if training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 8),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training)
    if not shard_files:
        ds = ds.shard(world, rank)
    if training:
        ds = ds.shuffle(10_000, seed=seed).repeat()
    def preprocess(record):
        jpeg, label = _parse(record)
        image = train_image(jpeg, image_size, min_area) if training else eval_image(jpeg, image_size)
        return image, label
    ds = ds.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE, deterministic=not training)
    return ds.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)
