"""A linear-regression task on the real trainer, whose exact update a test can compute.

Rank r starts from weights r + 1 (so only a broadcast makes the ranks agree) and sees inputs
r + 1 (so only an average of the gradients gives the expected update).
"""
import keras
import numpy as np
import tensorflow as tf

from common.task import Task, model_config

FEATURES, BATCH, LR = 3, 4, 0.01


class LinearTask(Task):
    name = "linear"
    item_unit = "examples"
    config = model_config({"batch_size": BATCH, "mode": "train", "iter_unit": "batch",
                           "display_every": 1, "warmup_steps": 0})
    last_model = None  # the model of the last run, for the test to read

    def build_model(self):
        init = keras.initializers.Constant(float(self.ctx.dist.rank + 1))
        model = keras.Sequential([keras.Input((FEATURES,)),
                                  keras.layers.Dense(1, kernel_initializer=init,
                                                     bias_initializer=init)])
        LinearTask.last_model = model
        return model

    def build_optimizer(self, steps_per_epoch, total_steps):
        return keras.optimizers.SGD(LR)

    def train_loss(self, model, batch, state=None):
        x, y = batch
        return tf.reduce_mean(tf.square(tf.cast(model(x), tf.float32) - y)), state

    def steps_per_epoch(self):
        return 1000

    def train_dataset(self):
        r = self.ctx.dist.rank
        x = tf.fill((self.flags.batch_size, FEATURES), float(r + 1))
        y = tf.zeros((self.flags.batch_size, 1))
        return tf.data.Dataset.from_tensors((x, y)).repeat()


def expected_params(world_size: int, steps: int):
    """Kernel and bias after ``steps`` of SGD on the gradient averaged over the ranks."""
    w, b = np.ones((FEATURES, 1)), np.ones(1)  # rank 0's initial values
    for _ in range(steps):
        gw, gb = np.zeros_like(w), np.zeros_like(b)
        for r in range(world_size):
            x = np.full((BATCH, FEATURES), r + 1.0)
            err = x @ w + b  # targets are 0
            gw += 2 * x.T @ err / err.size / world_size
            gb += 2 * err.mean() / world_size
        w, b = w - LR * gw, b - LR * gb
    return w, b
