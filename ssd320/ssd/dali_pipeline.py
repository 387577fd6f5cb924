"""SSD320's input pipeline in DALI, served through ``nvidia.dali.plugin.tf.DALIDataset``.

DALI reads, decodes (nvJPEG, ``mixed``, on a GPU unless ``--dali_cpu``; the CPU without one),
flips and crops with the boxes kept consistent (``bb_flip``, ``random_bbox_crop``), resizes
bilinearly without antialiasing (as TF-OD and the tf.data pipeline do) and normalises. Boxes
(left, top, right, bottom) and labels leave DALI padded to 100, with their count, on the device
the DALIDataset serves from, and nothing is chained after it (``common/data/dali.py``): the
per-anchor targets are encoded in the compiled step (``SSDTask.prepare_train_batch``), for the
whole batch at once, by the very function the tf.data pipeline applies to each image, so
evaluation inputs agree to decoder rounding and targets exactly. The graph (``build_pipeline``)
needs no TensorFlow (``benchtools/dali_compare.py`` runs it on a GPU and on the CPU).

Training crops differ in one way from TF-OD's (and the tf.data pipeline's): DALI samples the
window's sides (scale 0.75-1 each, aspect 0.75-1.33) rather than its area and aspect, and drops
a box whose centre falls outside the window, where TF-OD keeps any box that overlaps it.
"""
from __future__ import annotations

from common.data import dali_graph, tfrecord_index
from common.data.imagenet_stats import MEAN, STD
from ssd.config import MAX_BOXES

# The batch's parts, in the pipeline's output order.
NAMES = ("images", "boxes_ltrb", "classes", "count", "image_id", "height", "width")


def build_pipeline(files, idx_dir: str, training: bool, image_size: int, shard_id: int = 0,
                   num_shards: int = 1, where: dali_graph.Placement = dali_graph.CPU):
    """The ``@pipeline_def`` function of this rank's shard of ``files``, its outputs ``NAMES``."""
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def, types

    idx_files = [tfrecord_index.index_path(idx_dir, f) for f in files]

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
        images = fn.decoders.image(r["image/encoded"], **where.decoder, output_type=types.RGB)
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
        images = fn.crop_mirror_normalize(images, dtype=where.image_dtype(),
                                          output_layout="HWC", mean=list(MEAN), std=list(STD))
        count = fn.reshape(fn.cast(labels.shape(), dtype=types.INT32), shape=[])
        boxes = fn.pad(boxes, axes=(0,), shape=(MAX_BOXES,), fill_value=0.0)
        labels = fn.pad(labels, axes=(0,), shape=(MAX_BOXES,), fill_value=0)
        scalars = [fn.reshape(r[f"image/{k}"], shape=[]) for k in ("id", "height", "width")]
        return tuple(where.output(x) for x in (images, boxes, labels, count, *scalars))

    return pipeline


def dataset(files, idx_dir: str, batch_size: int, image_size: int, training: bool,
            rank: int = 0, world: int = 1, where: dali_graph.Placement = dali_graph.CPU,
            seed: int | None = None, num_threads: int = 4):
    """Dicts of ``NAMES`` for this rank: images (N, S, S, 3) float32 or float16, boxes_ltrb
    (N, 100, 4) float32 normalised, classes (N, 100) int32 and their count (N,) int32, then
    image_id, height, width (N,) int64. Endless for training; one pass over the rank's shard
    per iteration for evaluation (``dali.EvalPass``)."""
    import tensorflow as tf

    from common.data import dali
    from common.runtime.distributed import rank_seed
    pipe = build_pipeline(files, idx_dir, training, image_size, rank, world, where)
    ds = dali.serve(pipe, where, batch_size,
                    ((batch_size, image_size, image_size, 3), (batch_size, MAX_BOXES, 4),
                     (batch_size, MAX_BOXES), (batch_size,), (batch_size,), (batch_size,),
                     (batch_size,)),
                    (dali.tf_image_dtype(where), tf.float32, tf.int32, tf.int32, tf.int64, tf.int64,
                     tf.int64), num_threads, rank_seed(seed, rank), names=NAMES)
    if training:
        return ds
    return dali.EvalPass(ds, dali.eval_shard_size(files, idx_dir, rank, world), batch_size)
