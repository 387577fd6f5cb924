"""The benchmark scripts' FLOP count: the graph count that compares our models with their peers
agrees with the layer count, and counts matmuls with their transposes and nested functions."""
import keras
import pytest
import tensorflow as tf

from benchtools.mfu import forward_flops, graph_flops
from rn50.model import build_resnet
from ssd.model import build_ssd


@pytest.mark.parametrize("build, shape", [
    (lambda: build_resnet("resnet_tiny", 10, 64), (1, 64, 64, 3)),
    (lambda: build_ssd("resnet_tiny", 4, 128), (1, 128, 128, 3)),
])
def test_graph_count_equals_the_layer_count(build, shape):
    model = build()
    assert graph_flops(lambda x: model(x, training=False), tf.TensorSpec(shape)) == \
        forward_flops(model) > 0


def test_graph_count_reads_transposes_batches_and_nested_functions():
    @tf.function
    def inner(a, b):
        return tf.matmul(a, b, transpose_a=True)  # (5, 3)^T (5, 4): 2 * 3 * 4 * 5

    def fn(a, b, x, y):
        return inner(a, b), tf.linalg.matmul(x, y, adjoint_b=True)  # 7 x (2, 6) (8, 6)^T

    specs = [tf.TensorSpec(s) for s in ((5, 3), (5, 4), (7, 2, 6), (7, 8, 6))]
    assert graph_flops(fn, *specs) == 2 * 3 * 4 * 5 + 7 * 2 * 2 * 8 * 6


def test_graph_count_refuses_dynamic_shapes():
    dense = keras.layers.Dense(3)
    with pytest.raises(ValueError, match="dynamic shape"):
        graph_flops(lambda x: dense(x), tf.TensorSpec((None, 4)))
