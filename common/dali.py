"""What every model's DALI pipeline shares: where it runs, how it is served to TensorFlow, and
how a rank's evaluation shard is cut.

On a GPU a pipeline runs on this process's GPU (``device_id`` = local rank: DALI counts physical
GPUs) and is served on ``/gpu:0``, the one GPU Horovod's launch leaves visible to TensorFlow;
with no GPU it runs on the CPU (``device_id=None``), which is how the tests run it.
``nvidia.dali`` is imported only when a pipeline is built, so ``--dali`` is the only path that
needs it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import tensorflow as tf

from common import tfrecord_index


@dataclasses.dataclass(frozen=True)
class Placement:
    gpu: bool
    device_id: int | None  # None: DALI's CPU-only mode

    @property
    def tf_device(self) -> str:
        return "/gpu:0" if self.gpu else "/cpu:0"


def placement(local_rank: int) -> Placement:
    gpu = bool(tf.config.list_physical_devices("GPU"))
    return Placement(gpu, local_rank if gpu else None)


def serve(pipeline_def: Callable, where: Placement, batch_size: int,
          output_shapes: Sequence[tuple], output_dtypes: Sequence[tf.DType],
          num_threads: int, seed: int | None = None,
          with_inputs: bool = False) -> tf.data.Dataset:
    """Builds ``pipeline_def`` (a ``@pipeline_def`` function) and serves its batches as a
    ``tf.data.Dataset``; ``with_inputs`` for a pipeline fed by an ``external_source``."""
    import nvidia.dali.plugin.tf as dali_tf

    pipe = pipeline_def(batch_size=batch_size, num_threads=num_threads,
                        device_id=where.device_id, seed=seed, prefetch_queue_depth=2)
    dataset_cls = (dali_tf.experimental.DALIDatasetWithInputs if with_inputs
                   else dali_tf.DALIDataset)
    with tf.device(where.tf_device):
        return dataset_cls(pipeline=pipe, batch_size=batch_size, device_id=where.device_id,
                           output_shapes=tuple(output_shapes), output_dtypes=tuple(output_dtypes))


def rank_seed(seed: int | None, rank: int) -> int | None:
    """Each rank's augmentation seed: other draws on every rank, reproducible with ``--seed``."""
    return None if seed is None else seed + rank


def index_files(files: Sequence[str], idx_dir: str) -> list[str]:
    return [tfrecord_index.index_path(idx_dir, f) for f in files]


def eval_shard_size(files: Sequence[str], idx_dir: str, rank: int, world: int) -> int:
    """Records in this rank's contiguous shard of ``files`` as DALI's reader splits them: one
    evaluation pass takes this many, cutting off the padding DALI adds to the last batch."""
    n = tfrecord_index.count_records(files, idx_dir)
    return (rank + 1) * n // world - rank * n // world
