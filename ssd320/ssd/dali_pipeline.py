"""SSD320's input pipeline in DALI, served through ``nvidia.dali.plugin.tf.DALIDataset``.

DALI reads, decodes (nvJPEG, ``mixed``, on a GPU; the CPU without one), flips and crops with the
boxes kept consistent (``bb_flip``, ``random_bbox_crop``), resizes bilinearly without
antialiasing (as TF-OD and the tf.data pipeline do) and normalises. Boxes and labels leave DALI
padded to 100; the per-anchor targets are then encoded in TensorFlow by the very function the
tf.data pipeline uses, so evaluation inputs agree to decoder rounding and targets exactly.

Training crops differ in one way from TF-OD's (and the tf.data pipeline's): DALI samples the
window's sides (scale 0.75-1 each, aspect 0.75-1.33) rather than its area and aspect, and drops
a box whose centre falls outside the window, where TF-OD keeps any box that overlaps it.
"""
from __future__ import annotations

import tensorflow as tf

from common import dali
from common.images import MEAN, STD
from common.input_errors import checked_range
from ssd import tfdata_pipeline

MAX_BOXES = tfdata_pipeline.MAX_BOXES


def _build_pipeline(files, idx_files, training, image_size, shard_id, num_shards, gpu):
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def
    def pipeline():
        features = {"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                    "image/object/class/label": tfrec.VarLenFeature(tfrec.int64, 0)}
        for key in ("height", "width", "id"):
            features[f"image/{key}"] = tfrec.FixedLenFeature([1], tfrec.int64, -1)
        for key in ("xmin", "ymin", "xmax", "ymax"):
            features[f"image/object/bbox/{key}"] = tfrec.VarLenFeature(tfrec.float32, 0.0)
        r = fn.readers.tfrecord(
            path=files, index_path=idx_files, features=features, name="Reader",
            shard_id=shard_id, num_shards=num_shards, random_shuffle=training,
            initial_fill=2048 if training else 100, pad_last_batch=not training,
            stick_to_shard=not training)
        boxes = fn.stack(*(r[f"image/object/bbox/{k}"] for k in ("xmin", "ymin", "xmax", "ymax")),
                         axis=1)  # (n, 4) left, top, right, bottom
        labels = fn.cast(r["image/object/class/label"], dtype=types.INT32)
        images = fn.decoders.image(r["image/encoded"], device="mixed" if gpu else "cpu",
                                   output_type=types.RGB)
        if training:
            coin = fn.random.coin_flip(probability=0.5)
            images = fn.flip(images, horizontal=coin)
            boxes = fn.bb_flip(boxes, ltrb=True, horizontal=coin)
            anchor, shape, boxes, labels = fn.random_bbox_crop(
                boxes, labels, bbox_layout="xyXY", scaling=[0.75, 1.0],
                aspect_ratio=[0.75, 1.333], thresholds=[0.0], allow_no_crop=False,
                num_attempts=100)
            images = fn.slice(images, anchor, shape, normalized_anchor=True,
                              normalized_shape=True, out_of_bounds_policy="trim_to_shape")
        images = fn.resize(images, resize_x=image_size, resize_y=image_size,
                           interp_type=types.INTERP_LINEAR, antialias=False)
        images = fn.crop_mirror_normalize(images, dtype=types.FLOAT, output_layout="HWC",
                                          mean=list(MEAN), std=list(STD))
        count = fn.cast(labels.shape(), dtype=types.INT32)  # (1,)
        boxes = fn.pad(boxes, axes=(0,), shape=(MAX_BOXES,), fill_value=0.0)
        labels = fn.pad(labels, axes=(0,), shape=(MAX_BOXES,), fill_value=0)
        meta = fn.cat(r["image/id"], r["image/height"], r["image/width"])  # (3,) int64
        return images, boxes, labels, count, meta

    return pipeline


def dataset(files, idx_dir: str, batch_size: int, image_size: int, training: bool, anchors,
            num_classes: int, rank: int = 0, world: int = 1, local_rank: int = 0,
            seed: int | None = None, num_threads: int = 4) -> tf.data.Dataset:
    """Batches of the same dicts as ``tfdata_pipeline.dataset`` for this rank."""
    where = dali.placement(local_rank)
    pipe = _build_pipeline(files, dali.index_files(files, idx_dir), training, image_size, rank,
                           world, where.gpu)
    ds = dali.serve(pipe, where, batch_size,
                    ((batch_size, image_size, image_size, 3), (batch_size, MAX_BOXES, 4),
                     (batch_size, MAX_BOXES), (batch_size, 1), (batch_size, 3)),
                    (tf.float32, tf.float32, tf.int32, tf.int32, tf.int64), num_threads,
                    dali.rank_seed(seed, rank))
    anchors = tf.constant(anchors)

    def encode(image, boxes, labels, count, meta):
        xmin, ymin, xmax, ymax = tf.unstack(boxes, axis=-1)
        yx = tf.stack([ymin, xmin, ymax, xmax], axis=-1)
        classes = checked_range(labels[: count[0]], 1, num_classes, "class")
        ex = {"image_id": meta[0], "height": meta[1], "width": meta[2]}
        return tfdata_pipeline.finish(image, yx[: count[0]], classes, ex, anchors)

    ds = ds.unbatch().map(encode, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    if not training:
        # One pass over this rank's shard: DALI pads the last batch, so cut the padding off.
        ds = ds.take(dali.eval_shard_size(files, idx_dir, rank, world))
    return ds.batch(batch_size, drop_remainder=training).prefetch(tf.data.AUTOTUNE)
