"""Transformer-XL training batches read by DALI: the same micro-batches as
``tfdata_pipeline.dataset``, in the same order, served through ``DALIDataset``.

DALI's numpy reader reads each row's segment (tgt_len + 1 tokens) straight from the prepared
``train.npy`` (memory-mapped, only the region of interest is read); an external source gives
every sample its start: row g of the global batch is the g-th of ``rows`` equal contiguous
streams, and step t reads its tokens [t * tgt_len, (t + 1) * tgt_len + 1). Nothing is shuffled;
each rank reads only its own rows. Inputs and targets are the segment without its last and
without its first token, cut in DALI: nothing is chained after the DALIDataset
(``common/data/dali.py``), which on a GPU serves both from the GPU. The graph (``build_pipeline``)
needs no TensorFlow (``benchtools/dali_compare.py`` runs it on a GPU and on the CPU).
"""
from __future__ import annotations

import numpy as np

from common.data import dali_graph
from common.errors import DataError
from txl.streams import layout


def _offsets(length: int, steps: int, batch_size: int, batch_chunk: int, rank: int,
             tgt_len: int, first_step: int):
    """A DALI per-sample source: the file offset of each sample's segment, in the order the
    trainer consumes micro-batches (step t's micro-batches 0..k-1, then step t + 1's)."""
    per_epoch = steps * batch_chunk * batch_size
    first = (first_step % steps) * batch_chunk * batch_size

    def offset(info) -> np.ndarray:
        micro, b = divmod((first + info.idx_in_epoch) % per_epoch, batch_size)
        t, c = divmod(micro, batch_chunk)
        row = (rank * batch_chunk + c) * batch_size + b
        return np.array([row * length + t * tgt_len], np.int32)
    return offset


def build_pipeline(path: str, batch_size: int, tgt_len: int, rank: int = 0, world: int = 1,
                   batch_chunk: int = 1, first_step: int = 0,
                   where: dali_graph.Placement = dali_graph.CPU):
    """The ``@pipeline_def`` function of this rank's micro-batches, from step ``first_step``:
    its outputs (inputs, targets), each (tgt_len,) int32 per sample."""
    from nvidia.dali import fn, pipeline_def, types

    total = len(np.load(path, mmap_mode="r"))
    if total >= 2 ** 31:  # DALI's region of interest is int32
        raise DataError(f"{path} holds {total:,} tokens; DALI reads at most 2**31 - 1: "
                        "drop --dali")
    length, steps = layout(total, batch_size * batch_chunk * world, tgt_len)
    source = _offsets(length, steps, batch_size, batch_chunk, rank, tgt_len, first_step)

    @pipeline_def
    def pipeline():
        start = fn.external_source(source=source, batch=False, dtype=types.INT32)
        segment = fn.readers.numpy(files=[path] * batch_size, roi_start=start,
                                   roi_end=start + (tgt_len + 1), random_shuffle=False,
                                   name="tokens")
        return where.output(segment[:tgt_len]), where.output(segment[1:])

    return pipeline


def dataset(path: str, batch_size: int, tgt_len: int, rank: int = 0, world: int = 1,
            batch_chunk: int = 1, first_step: int = 0,
            where: dali_graph.Placement = dali_graph.CPU, num_threads: int = 2):
    """Endless (inputs, targets) int32 micro-batches of this rank, from step ``first_step``
    (a ``dali.Served``)."""
    import tensorflow as tf

    from common.data import dali
    pipeline = build_pipeline(path, batch_size, tgt_len, rank, world, batch_chunk, first_step,
                              where)
    return dali.serve(pipeline, where, batch_size, ((batch_size, tgt_len),) * 2,
                      (tf.int32, tf.int32), num_threads, seed=0, with_inputs=True)
