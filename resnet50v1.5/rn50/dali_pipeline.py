"""The ImageNet pipeline in DALI: the same preprocessing as ``tfdata_pipeline``.

On a GPU the JPEGs are decoded by nvJPEG (``mixed``; the CPU with ``--dali_cpu``) and everything
after runs on the GPU, images in float16 under float16 AMP; with no GPU the whole pipeline runs
on the CPU (``device_id=None``), which is how it is tested here. Served to TensorFlow through
``nvidia.dali.plugin.tf.DALIDataset`` with nothing chained after it (``common/data/dali.py``): the
labels leave DALI 0-based, and their range check and one-hot encoding happen in the compiled
step (``ResNetTask.train_loss``). The graph (``build_pipeline``) needs no TensorFlow:
``benchtools/dali_compare.py`` runs it on a GPU and on the CPU and compares the two.
"""
from __future__ import annotations

from common.data import dali_graph, tfrecord_index
from rn50 import eval_preprocessing

NAMES = ("images", "labels")  # the pipeline's outputs, in order


def build_pipeline(files, idx_dir: str, training: bool, image_size: int, shard_id: int = 0,
                   num_shards: int = 1, where: dali_graph.Placement = dali_graph.CPU,
                   min_area: float = 0.08, *,
                   prep: eval_preprocessing.EvalPreprocessing):
    """The ``@pipeline_def`` function of this rank's shard of ``files``: images (size, size, 3)
    normalised, float16 where ``where`` says, and 0-based int32 labels. Evaluation prepares
    images by ``prep`` (``--eval_preprocessing``: its resize, interpolation and normalisation;
    DALI's own crop and rounding); training normalises by its mean and std."""
    import nvidia.dali.tfrecord as tfrec
    from nvidia.dali import fn, pipeline_def, types

    idx_files = [tfrecord_index.index_path(idx_dir, f) for f in files]
    interp = {"bilinear": types.INTERP_LINEAR, "bicubic": types.INTERP_CUBIC,
              "nearest": types.INTERP_NN}[prep.interpolation]

    @pipeline_def
    def pipeline():
        records = fn.readers.tfrecord(
            path=files, index_path=idx_files, name="Reader",
            features={"image/encoded": tfrec.FixedLenFeature((), tfrec.string, ""),
                      "image/class/label": tfrec.FixedLenFeature([1], tfrec.int64, -1)},
            shard_id=shard_id, num_shards=num_shards, random_shuffle=training,
            initial_fill=10_000 if training else 100, pad_last_batch=not training,
            stick_to_shard=not training)
        if training:
            images = fn.decoders.image_random_crop(
                records["image/encoded"], **where.decoder, output_type=types.RGB,
                random_aspect_ratio=[3 / 4, 4 / 3], random_area=[min_area, 1.0], num_attempts=100)
            images = fn.resize(images, resize_x=image_size, resize_y=image_size)
            mirror = fn.random.coin_flip(probability=0.5)
        else:
            images = fn.decoders.image(records["image/encoded"], **where.decoder,
                                       output_type=types.RGB)
            if prep.resize_for(image_size) is None:
                images = fn.resize(images, resize_x=image_size, resize_y=image_size,
                                   interp_type=interp, antialias=prep.antialias)
            else:
                images = fn.resize(images, resize_shorter=prep.resize_for(image_size),
                                   interp_type=interp, antialias=prep.antialias)
            mirror = 0
        images = fn.crop_mirror_normalize(
            images, dtype=where.image_dtype(), output_layout="HWC", crop=(image_size, image_size),
            mean=list(prep.mean), std=list(prep.std), mirror=mirror)
        labels = fn.reshape(records["image/class/label"], shape=[]) - 1
        return where.output(images), where.output(fn.cast(labels, dtype=types.INT32))

    return pipeline


def dataset(files, idx_dir: str, batch_size: int, image_size: int, training: bool, rank: int = 0,
            world: int = 1, where: dali_graph.Placement = dali_graph.CPU,
            seed: int | None = None, num_threads: int = 4, min_area: float = 0.08, *,
            prep: eval_preprocessing.EvalPreprocessing):
    """(images (N, size, size, 3) float32 or float16, labels (N,) int32 0-based) batches for
    this rank: endless for training, one pass over its shard per iteration for evaluation
    (``dali.EvalPass``)."""
    import tensorflow as tf

    from common.data import dali
    from common.runtime.distributed import rank_seed
    pipe = build_pipeline(files, idx_dir, training, image_size, rank, world, where, min_area,
                          prep=prep)
    ds = dali.serve(pipe, where, batch_size,
                    ((batch_size, image_size, image_size, 3), (batch_size,)),
                    (dali.tf_image_dtype(where), tf.int32), num_threads, rank_seed(seed, rank))
    if training:
        return ds
    return dali.EvalPass(ds, dali.eval_shard_size(files, idx_dir, rank, world), batch_size)
