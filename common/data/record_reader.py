"""This rank's share of a split's TFRecords as a tf.data pipeline of serialized records.

Files are split over ranks when there are at least as many as ranks, records otherwise. Training
shuffles the files each epoch and the records through a buffer, and repeats; evaluation reads
once, in a fixed order.

With a seed, training is reproducible: the same seed gives the same records in the same order
and the same augmentation of each. Order is kept through the parallel stages (tf.data's
``deterministic``), and each record carries a seed of its own (``element_seeds``) for the
stateless random ops of its augmentation, so the values do not depend on which worker thread
took it. Without a seed, the parallel stages may reorder records for speed.
"""
from __future__ import annotations

import random

import tensorflow as tf

from common import graph


def rank_records(files, training: bool, rank: int = 0, world: int = 1, seed: int | None = None,
                 shuffle_buffer: int = 10_000) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices(list(files))
    shard_files = len(files) >= world
    if shard_files:
        ds = ds.shard(world, rank)
    if training:
        ds = ds.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 8),
                       num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=keeps_order(training, seed))
    if not shard_files:
        ds = ds.shard(world, rank)
    if training:
        ds = ds.shuffle(shuffle_buffer, seed=seed).repeat()
    return ds


def keeps_order(training: bool, seed: int | None) -> bool:
    """Whether parallel stages must keep their input order: always for evaluation (results are
    matched to images in order), and for seeded training."""
    return not training or seed is not None


def element_seeds(ds: tf.data.Dataset, seed: int | None) -> tf.data.Dataset:
    """``(element, seed)`` pairs: seed is an int64 (2,) tensor for stateless random ops, unique to
    the element's position in the stream (``[seed, n]`` for the n-th element). Without a seed,
    one is drawn from Python's generator (which ``--seed`` also sets)."""
    base = random.getrandbits(31) if seed is None else seed
    return graph.dataset_map(ds.enumerate(),
                             lambda n, x: (x, tf.stack([tf.constant(base, tf.int64), n])))
