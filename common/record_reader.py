"""This rank's share of a split's TFRecords as a tf.data pipeline of serialized records.

Files are split over ranks when there are at least as many as ranks, records otherwise. Training
shuffles the files each epoch and the records through a buffer, and repeats; evaluation reads
once, in a fixed order."""
from __future__ import annotations

import tensorflow as tf


def rank_records(files, training: bool, rank: int = 0, world: int = 1, seed: int | None = None,
                 shuffle_buffer: int = 10_000) -> tf.data.Dataset:
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
        ds = ds.shuffle(shuffle_buffer, seed=seed).repeat()
    return ds
