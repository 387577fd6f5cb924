"""Sharded TFRecord writing shared by every ``prepare_dataset.py``.

Shards are named ``<prefix>-NNNNN-of-MMMMM`` (what ``tfrecord_index.shard_files`` reads), written
as ``*.tmp`` and renamed when complete, so an interrupted run never leaves a half shard that
looks whole. An earlier preparation's shards of the same prefix (any shard count, their ``.tmp``
and their index files) are removed first, so no stale shard is ever read. Each shard gets its
DALI index file in ``<out_dir>/idx``.
"""
from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Sequence

from common.data import tfrecord_index


def remove_stale(out_dir: str, prefix: str, log) -> None:
    pattern = re.compile(rf"^{re.escape(prefix)}-\d{{5}}-of-\d{{5}}(\.tmp)?(\.idx|\.crc-ok)?$")
    stale = [os.path.join(d, f) for d in (out_dir, os.path.join(out_dir, "idx"))
             if os.path.isdir(d) for f in os.listdir(d) if pattern.match(f)]
    for path in stale:
        os.remove(path)
    if stale:
        log(f"{prefix}: removed {len(stale)} file(s) of an earlier preparation")


def write_shards(items: Sequence, serialize: Callable[[object], bytes], out_dir: str,
                 prefix: str, shards: int, log=print, unit: str = "examples") -> list[str]:
    """Writes ``serialize(item)`` for every item, item i going to shard i % shards."""
    import tensorflow as tf

    shards = max(1, min(shards, len(items)))
    os.makedirs(os.path.join(out_dir, "idx"), exist_ok=True)
    remove_stale(out_dir, prefix, log)
    paths, start, done = [], time.time(), 0
    for s in range(shards):
        path = os.path.join(out_dir, f"{prefix}-{s:05d}-of-{shards:05d}")
        tmp = path + ".tmp"
        try:
            with tf.io.TFRecordWriter(tmp) as writer:
                for item in items[s::shards]:
                    writer.write(serialize(item))
                    done += 1
                    if done % 500 == 0 or done == len(items):
                        rate = done / max(time.time() - start, 1e-9)
                        log(f"{prefix}: {done}/{len(items)} {unit} ({rate:.0f}/s, "
                            f"eta {(len(items) - done) / rate:.0f} s)")
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        os.replace(tmp, path)
        tfrecord_index.write_index(path, tfrecord_index.index_path(os.path.join(out_dir, "idx"),
                                                                   path))
        paths.append(path)
    return paths
