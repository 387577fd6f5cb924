"""Gradient accumulation (--batch_chunk, in common/trainer.py): k micro-batches of b rows give
the update of one batch of k x b rows, in any model's loop."""
import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY
from linear_task import FEATURES, LinearTask

from common import runner
from rn50.task import ResNetTask

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


class RowsTask(LinearTask):
    """LinearTask on 64 different rows read in order, so micro-batches differ from each other."""

    def train_dataset(self):
        rng = np.random.default_rng(0)
        x = rng.normal(size=(64, FEATURES)).astype("float32")
        y = rng.normal(size=(64, 1)).astype("float32")
        return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(self.flags.batch_size)


def _weights(tmp_path, name, batch, chunk):
    s = runner.run(RowsTask, ["x", "--results_dir", str(tmp_path / name), "--num_iter", "3",
                              "--batch_size", str(batch), "--batch_chunk", str(chunk)])
    assert s["final_step"] == 3
    return [w.numpy() for w in RowsTask.last_model.weights]


def test_batch_chunk_k_equals_one_batch_k_times_larger(tmp_path):
    big = _weights(tmp_path, "big", 8, 1)
    for a, b in zip(_weights(tmp_path, "chunked", 2, 4), big):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    first_only = _weights(tmp_path, "small", 2, 1)  # what dropping micro-batches would give
    assert not np.allclose(first_only[0], big[0])


def test_throughput_and_global_batch_count_every_micro_batch(tmp_path):
    s = runner.run(ResNetTask, ["main.py", *TINY, "--mode", "training_benchmark", "--iter_unit",
                                "batch", "--num_iter", "3", "--warmup_steps", "1",
                                "--batch_chunk", "2", "--results_dir", str(tmp_path)])
    assert s["global_batch_size"] == 16 and s["timed_steps"] == 2  # 8 per batch x 2
