"""What every model's DALI pipeline shares: where it runs, how it is served to TensorFlow, and
how a rank's evaluation pass is cut.

On a GPU a pipeline runs on this process's GPU (``Devices.dali_device_id``: the CUDA device
TensorFlow computes on) and its ``DALIDataset`` sits on ``/gpu:0``, every output on the GPU.
Nothing is chained after it: TensorFlow's dataset transformations have CPU kernels only, so a
``map`` or ``unbatch`` after a GPU-placed DALIDataset would copy each batch to the host and
back, or fail. What a model does to a batch after DALI happens either in the DALI graph or in
the compiled step (``Task.train_loss``, ``Task.eval_update``), and an evaluation pass is cut by
``EvalPass``, which marks the last batch's padding rows for the evaluation to weigh zero. With
no GPU the same pipeline runs on the CPU (``device_id=None``), which is how the tests run it.
The pipelines themselves (``*/dali_pipeline.build_pipeline``) and their placement
(``common/data/dali_graph.py``) need no TensorFlow.

``nvidia.dali`` is imported only when a pipeline is built, so ``--dali`` is the only path that
needs it.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import tensorflow as tf

from common.data import tfrecord_index
from common.data.dali_graph import HW_DECODER_LOAD, Placement


def placement(capabilities, flags) -> Placement:
    """Where a DALI pipeline runs for this process (``devices.Capabilities``): the CUDA device
    TensorFlow computes on, or DALI's CPU-only mode without a GPU; how it decodes
    (``--dali_cpu``, ``--dali_hw_decoder_load``)."""
    load = flags.dali_hw_decoder_load
    return Placement(capabilities.devices.dali_device_id, flags.dali_cpu,
                     float16=capabilities.input_float16,
                     hw_decoder_load=HW_DECODER_LOAD if load is None else load)


def tf_image_dtype(where: Placement) -> tf.DType:
    return tf.float16 if where.float16 else tf.float32


class Served:
    """A DALIDataset handed to the loops as a plain iterable, not a ``tf.data.Dataset``: nothing
    can be chained after it. Yields the pipeline's outputs as a tuple, or as a dict when
    ``names`` are given (Python only: no TensorFlow op)."""

    def __init__(self, dataset: tf.data.Dataset, names: Sequence[str] | None = None):
        self.dataset, self.names = dataset, names

    def __iter__(self) -> Iterator:
        for batch in self.dataset:
            yield dict(zip(self.names, batch)) if self.names else batch


def serve(pipeline_def: Callable, where: Placement, batch_size: int,
          output_shapes: Sequence[tuple], output_dtypes: Sequence[tf.DType],
          num_threads: int, seed: int | None = None, with_inputs: bool = False,
          names: Sequence[str] | None = None) -> Served:
    """Builds ``pipeline_def`` (a ``@pipeline_def`` function) and serves its batches, endlessly,
    from a DALIDataset on the pipeline's device; ``with_inputs`` for a pipeline fed by an
    ``external_source``. Every output of the pipeline must go through ``where.output``."""
    import nvidia.dali.plugin.tf as dali_tf

    device_id = where.device_id
    pipe = pipeline_def(batch_size=batch_size, num_threads=num_threads, device_id=device_id,
                        seed=seed, prefetch_queue_depth=2)
    dataset_cls = (dali_tf.experimental.DALIDatasetWithInputs if with_inputs
                   else dali_tf.DALIDataset)
    with tf.device("/gpu:0" if where.gpu else "/cpu:0"):  # after pinning: this GPU
        dataset = dataset_cls(pipeline=pipe, batch_size=batch_size, device_id=device_id,
                              output_shapes=tuple(output_shapes),
                              output_dtypes=tuple(output_dtypes))
    return Served(dataset, names)


def index_files(files: Sequence[str], idx_dir: str) -> list[str]:
    return [tfrecord_index.index_path(idx_dir, f) for f in files]


def eval_shard_size(files: Sequence[str], idx_dir: str, rank: int, world: int) -> int:
    """Records in this rank's contiguous shard of ``files`` as DALI's reader splits them."""
    n = tfrecord_index.count_records(files, idx_dir)
    return (rank + 1) * n // world - rank * n // world


class EvalPass:
    """Passes over one rank's evaluation shard, read from an endless DALIDataset whose reader
    pads the shard's last batch (``pad_last_batch``) and keeps to its shard
    (``stick_to_shard``): a pass is ``ceil(examples / batch_size)`` batches, the last sliced to
    its real rows on the device. One pipeline serves every evaluation of a run, so a pass that
    is left early (the check before training reads one batch) is finished by the next one
    before it starts."""

    def __init__(self, served: Served, examples: int, batch_size: int):
        self.served, self.examples, self.batch_size = served, examples, batch_size
        self.batches = -(-examples // batch_size)
        self._iterator = None
        self._position = 0  # batches of the current pass already read

    def __iter__(self) -> Iterator:
        for batch, real in self._pass():
            yield batch if real == self.batch_size else tf.nest.map_structure(
                lambda t, real=real: t[:real], batch)

    def padded(self) -> Iterator:
        """The pass as the evaluation reads it: (batch, valid), every batch whole, the last
        one's padding rows (DALI's repeats of the shard's last record) marked False in
        ``valid`` ((batch_size,) bool, made on the host) instead of sliced off on the device."""
        for batch, real in self._pass():
            yield batch, np.arange(self.batch_size) < real

    def _pass(self) -> Iterator:
        """(batch, rows of it that are the shard's) for one pass."""
        if not self.batches:
            return
        if self._iterator is None:
            self._iterator = iter(self.served)
        while self._position % self.batches:  # the rest of a pass left early
            next(self._iterator)
            self._position += 1
        self._position = 0
        last = self.examples - (self.batches - 1) * self.batch_size
        for i in range(self.batches):
            batch = next(self._iterator)
            self._position += 1
            yield batch, last if i == self.batches - 1 else self.batch_size
