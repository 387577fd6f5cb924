"""Model FLOP utilisation: FLOPs of a model's convolutions and matmuls, and the machine's
practical ceiling measured as a chain of large matmuls in the same process."""
from __future__ import annotations

import time

import keras
import tensorflow as tf


def matmul_ceiling(dtype=tf.float32, n: int = 2048, reps: int = 20) -> float:
    """FLOP/s of dependent n x n matmuls in ``dtype``: the practical compute ceiling."""
    a = tf.cast(tf.random.normal((n, n)), dtype)
    b = tf.cast(tf.random.normal((n, n), stddev=n ** -0.5), dtype)  # keeps the scale steady

    @tf.function
    def chain():
        x = a
        for _ in range(reps):  # each product feeds the next: nothing can be computed once
            x = tf.linalg.matmul(x, b)
        return x[0, 0]
    chain().numpy()  # trace and warm up
    best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        chain().numpy()
        best = max(best, 2 * n ** 3 * reps / (time.perf_counter() - t0))
    return best


def forward_flops(model: keras.Model) -> int:
    """2 x multiply-adds of every convolution and dense layer for one example, counting each
    call of a layer that is shared (SSD's towers run on five pyramid levels)."""
    total = 0
    for layer in model.layers:
        if not isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            continue
        for node in layer._inbound_nodes:
            out = node.output_tensors[0].shape
            if isinstance(layer, keras.layers.Conv2D):
                kh, kw = layer.kernel_size
                total += 2 * out[1] * out[2] * out[3] * kh * kw * layer.kernel.shape[2]
            else:
                positions = 1
                for d in out[1:-1]:
                    positions *= d
                total += 2 * positions * layer.kernel.shape[0] * layer.kernel.shape[1]
    return int(total)
