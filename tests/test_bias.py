"""common.layers.bias: bias gradients in bfloat16 are the float32 ones rounded, over many rows
(Keras' own ``bias_add`` stops summing at 256 on a CPU), and the layers built on it keep Keras'
results and weights."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from common.layers.bias import Dense, add_bias
from common.layers.conv2d import Conv2D
from common.runtime import devices

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _bias_gradient(layer_cls, shape, kwargs, dtype):
    """d(sum(y * c)) / d(bias) for a layer of ``dtype`` on seeded inputs of ``shape``."""
    keras.utils.set_random_seed(0)
    layer = layer_cls(dtype=dtype, bias_initializer="random_normal", **kwargs)
    x = tf.random.stateless_normal(shape, seed=(1, 2))
    layer(x)
    with tf.GradientTape() as tape:
        y = tf.cast(layer(x), tf.float32)
        loss = tf.reduce_sum(y * tf.linspace(0.5, 1.5, y.shape[-1]))
    return y.numpy(), tape.gradient(loss, layer.bias).numpy()


@pytest.mark.parametrize("layer_cls, shape, kwargs", [
    (Dense, (6144, 16), {"units": 8}),
    (Dense, (32, 192, 16), {"units": 8}),  # rank 3, as Transformer-XL's feed-forward
    (Conv2D, (6, 32, 32, 4), {"filters": 8, "kernel_size": 3, "padding": "same"}),
])
def test_bfloat16_bias_gradient_is_the_float32_one_rounded(layer_cls, shape, kwargs):
    rows = int(np.prod(shape[:-1]))
    y32, g32 = _bias_gradient(layer_cls, shape, kwargs, "float32")
    y16, g16 = _bias_gradient(layer_cls, shape, kwargs, "mixed_bfloat16")
    np.testing.assert_allclose(g32, rows * np.linspace(0.5, 1.5, 8), rtol=1e-4)
    np.testing.assert_allclose(g16, g32, rtol=1e-2)  # bfloat16's rounding of the sum, not 256
    np.testing.assert_allclose(y16, y32, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("layer_cls, kwargs", [
    (Dense, {"units": 5, "activation": "relu"}),
    (Conv2D, {"filters": 5, "kernel_size": 3, "padding": "same", "activation": "relu"})])
def test_float32_layers_equal_keras_with_the_same_weights(layer_cls, kwargs):
    keras_cls = keras.layers.Dense if layer_cls is Dense else keras.layers.Conv2D
    x = tf.random.stateless_normal((2, 7, 7, 3), seed=(3, 4))
    ours, theirs = layer_cls(bias_initializer="random_normal", **kwargs), keras_cls(**kwargs)
    ours(x), theirs(x)
    assert [w.path.split("/")[-1] for w in ours.weights] == ["kernel", "bias"]
    theirs.set_weights(ours.get_weights())
    np.testing.assert_allclose(ours(x).numpy(), theirs(x).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_add_bias_channels_first(dtype):
    x = tf.cast(tf.reshape(tf.range(2 * 3 * 2 * 2, dtype=tf.float32), (2, 3, 2, 2)), dtype)
    got = add_bias(x, tf.constant([10.0, 20.0, 30.0]), "channels_first")
    want = x.numpy().astype(np.float32) + np.array([10, 20, 30])[None, :, None, None]
    np.testing.assert_array_equal(tf.cast(got, tf.float32).numpy(), want)


def _gradient_op_types(dtype):
    x, b = tf.ones((64, 8), dtype), tf.ones((8,), dtype)

    @tf.function
    def grad(x, b):
        with tf.GradientTape() as tape:
            tape.watch(b)
            y = tf.nn.relu(add_bias(tf.matmul(x, tf.ones((8, 8), dtype)), b))
            loss = tf.reduce_sum(tf.cast(y, tf.float32))
        return tape.gradient(loss, b)
    graph = grad.get_concrete_function(x, b).graph
    return {op.type for op in graph.get_operations()}


@pytest.mark.parametrize("dtype", [tf.float16, tf.bfloat16])
def test_the_16_bit_workaround_is_for_a_cpu_only(dtype):
    """On a GPU (standing in here) a 16-bit bias is Keras' plain BiasAdd, whose BiasAddGrad
    accumulates in float32 there, and which Grappler fuses into the matmul before it; the
    custom gradient (an IdentityN around it) would block that fusion."""
    with devices.standing_in(devices.Devices(0, "stand-in GPU", 1)):
        on_gpu = _gradient_op_types(dtype)
    with devices.standing_in(devices.CPU_ONLY):
        on_cpu = _gradient_op_types(dtype)
    assert "BiasAddGrad" in on_gpu and "IdentityN" not in on_gpu
    assert "BiasAddGrad" not in on_cpu and "IdentityN" in on_cpu
