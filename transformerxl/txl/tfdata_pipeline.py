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

from common.errors import DataError


def streams(tokens: np.ndarray, rows: int) -> np.ndarray:
    """(rows, L) contiguous streams of the token stream."""
    length = len(tokens) // rows
    if length < 2:
        raise DataError(f"{len(tokens):,} tokens cannot make {rows} streams of 2 tokens or more: "
                        "lower --batch_size or --batch_chunk, or use more text")
    return np.asarray(tokens[:rows * length], np.int32).reshape(rows, length)


def steps_per_epoch(tokens: int, rows: int, tgt_len: int) -> int:
    return max(0, (tokens // rows - 1) // tgt_len)


def dataset(tokens: np.ndarray, batch_size: int, tgt_len: int, rank: int = 0, world: int = 1,
            batch_chunk: int = 1, repeat: bool = True) -> tf.data.Dataset:
    """(inputs (batch_size, tgt_len), targets (batch_size, tgt_len)) int32 micro-batches in the
    order the trainer consumes them: step 0's micro-batches 0..k-1, then step 1's, ..."""
    rows_per_rank = batch_size * batch_chunk
    all_rows = streams(tokens, rows_per_rank * world)
    mine = tf.constant(all_rows[rank * rows_per_rank:(rank + 1) * rows_per_rank])  # (R, L)
    steps = (all_rows.shape[1] - 1) // tgt_len
    if steps < 1:
        raise DataError(f"streams of {all_rows.shape[1]} tokens are shorter than one segment of "
                        f"--tgt_len {tgt_len} plus one")

    def micro_batch(i):
        t, c = i // batch_chunk, i % batch_chunk
        block = mine[c * batch_size:(c + 1) * batch_size, t * tgt_len:(t + 1) * tgt_len + 1]
        return block[:, :-1], block[:, 1:]

    ds = tf.data.Dataset.range(steps * batch_chunk).map(micro_batch)
    return ds.repeat() if repeat else ds
