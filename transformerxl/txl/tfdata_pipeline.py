"""Transformer-XL training batches in which every row continues the previous step's row.

The token stream is cut into ``rows`` = global batch (batch_size x processes x batch_chunk)
contiguous streams of equal length (the tail that does not divide is dropped). Step t reads
tokens [t * tgt_len, (t + 1) * tgt_len) of every stream as inputs and the same span shifted by
one as targets, so the memory a row carries from step t is the text that precedes its step t + 1.
Rank r owns streams [r * R, (r + 1) * R), R = batch_size x batch_chunk, and micro-batch c of a
step owns the c-th slice of batch_size of them: each (rank, micro-batch) keeps its streams for
the whole run. Nothing is shuffled (as in NVIDIA's pipeline); an epoch is one pass over the
streams, after which they start again.
"""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from common import graph
from txl.streams import layout, streams


def dataset(tokens: np.ndarray, batch_size: int, tgt_len: int, rank: int = 0, world: int = 1,
            batch_chunk: int = 1, repeat: bool = True, first_step: int = 0) -> tf.data.Dataset:
    """(inputs (batch_size, tgt_len), targets (batch_size, tgt_len)) int32 micro-batches in the
    order the trainer consumes them: step 0's micro-batches 0..k-1, then step 1's, ...;
    ``first_step`` > 0 starts where a resumed run continues (within the epoch)."""
    rows_per_rank = batch_size * batch_chunk
    length, steps = layout(len(tokens), rows_per_rank * world, tgt_len)
    lo = rank * rows_per_rank * length
    mine = tf.constant(np.asarray(tokens[lo:lo + rows_per_rank * length], np.int32)
                       .reshape(rows_per_rank, length))  # (R, L)

    def micro_batch(i):
        t, c = i // batch_chunk, i % batch_chunk
        block = mine[c * batch_size:(c + 1) * batch_size, t * tgt_len:(t + 1) * tgt_len + 1]
        return block[:, :-1], block[:, 1:]

    ds = graph.dataset_map(tf.data.Dataset.range(steps * batch_chunk), micro_batch)
    if repeat:
        ds = ds.repeat()
    return ds.skip((first_step % steps) * batch_chunk) if first_step else ds


def eval_segment_count(tokens: int, batch_size: int, tgt_len: int, drop_short: bool = False
                       ) -> int:
    """Segments ``eval_dataset`` yields for a split of ``tokens`` tokens."""
    n = tokens // batch_size - 1
    return max(0, n // tgt_len if drop_short else -(-n // tgt_len))


def eval_dataset(tokens: np.ndarray, batch_size: int, tgt_len: int, rank: int = 0,
                 world: int = 1, drop_short: bool = False) -> tf.data.Dataset:
    """Evaluation as NVIDIA's Transformer-XL does it (``run_wt103_base.sh eval``): the split cut
    into ``batch_size`` contiguous streams (the remainder dropped) and read in segments of
    ``tgt_len`` tokens in order, the last one shorter (or dropped: ``drop_short``), the memory
    carried from one segment to the next by the trainer. (inputs, targets) int32 of this rank's
    ``batch_size // world`` rows."""
    data = streams(tokens, batch_size)
    rows = batch_size // world
    mine = tf.constant(data[rank * rows:(rank + 1) * rows])
    n = data.shape[1] - 1
    count = eval_segment_count(len(tokens), batch_size, tgt_len, drop_short)
    return graph.dataset_map(tf.data.Dataset.range(count), lambda i: (
        mine[:, i * tgt_len:tf.minimum((i + 1) * tgt_len, n)],
        mine[:, i * tgt_len + 1:tf.minimum((i + 1) * tgt_len, n) + 1]))
