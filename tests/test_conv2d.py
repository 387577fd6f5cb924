"""common.layers.conv2d.Conv2D: Keras' convolution, with bfloat16 weight gradients that are right
where oneDNN's bfloat16 kernel is not (an input narrower than the stride, ``same`` padding)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from common.layers.conv2d import Conv2D, pointwise_conv, same_padding, subsample
from common.runtime import devices

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file

# (height, width, stride, kernel): output one column wide, kernel reaching into the padding.
DEGENERATE = [(1, 1, 2, 3), (2, 1, 2, 3), (2, 2, 3, 3), (3, 1, 2, 5), (1, 1, 4, 7), (4, 1, 4, 3)]


@pytest.mark.parametrize("size, kernel, stride, expected", [
    (1, 3, 2, (1, 1)), (2, 3, 3, (0, 1)), (5, 3, 2, (1, 1)), (4, 3, 2, (0, 1)), (3, 3, 4, (0, 0)),
    (8, 7, 2, (2, 3))])
def test_same_padding_is_tensorflows(size, kernel, stride, expected):
    assert same_padding(size, kernel, stride) == expected
    x = tf.ones((1, size, 1, 1))
    same = tf.nn.conv2d(x, tf.ones((kernel, 1, 1, 1)), (stride, 1), "SAME")
    before, after = expected
    valid = tf.nn.conv2d(tf.pad(x, [[0, 0], [before, after], [0, 0], [0, 0]]),
                         tf.ones((kernel, 1, 1, 1)), (stride, 1), "VALID")
    np.testing.assert_array_equal(same.numpy(), valid.numpy())


def _pair(h, w, stride, kernel, dtype="float32"):
    """Keras' Conv2D and ours with the same kernel, built on (h, w, 8) inputs."""
    args = dict(filters=8, kernel_size=kernel, strides=stride, padding="same", dtype=dtype)
    theirs, ours = keras.layers.Conv2D(**args), Conv2D(**args)
    theirs.build((None, h, w, 8))
    ours.build((None, h, w, 8))
    ours.set_weights(theirs.get_weights())
    return theirs, ours


@pytest.mark.parametrize("h, w, stride, kernel", DEGENERATE + [(5, 5, 2, 3), (8, 8, 1, 3)])
def test_same_function_as_keras_conv2d_in_float32(h, w, stride, kernel):
    theirs, ours = _pair(h, w, stride, kernel)
    x = tf.random.normal((3, h, w, 8), seed=1)
    with tf.GradientTape(persistent=True) as tape:
        a, b = theirs(x), ours(x)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tape.gradient(a, theirs.kernel).numpy(),
                               tape.gradient(b, ours.kernel).numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("h, w, stride, kernel", DEGENERATE)
def test_bfloat16_kernel_gradient_equals_float32s(h, w, stride, kernel):
    """Plain keras.layers.Conv2D fails this on CPUs with AVX512-BF16 (garbage gradients); ours
    must pass on every CPU. Repeated, with fresh memory between calls, as the defect reads
    memory it never wrote."""
    _, ours32 = _pair(h, w, stride, kernel)
    _, ours16 = _pair(h, w, stride, kernel, dtype="mixed_bfloat16")
    ours16.set_weights(ours32.get_weights())
    for trial in range(10):
        tf.random.normal((512, 512)) * 1e30  # noqa: B018 (dirties the allocator's free memory)
        x = tf.cast(tf.cast(tf.random.normal((4, h, w, 8), seed=trial), tf.bfloat16), tf.float32)
        dy = tf.random.normal((4, -(-h // stride), -(-w // stride), 8), seed=trial + 100)
        grads = []
        for layer in (ours32, ours16):
            with tf.GradientTape() as tape:
                y = tf.cast(layer(x), tf.float32)
            grads.append(tape.gradient(y, layer.kernel, output_gradients=dy).numpy())
        np.testing.assert_allclose(grads[1], grads[0], rtol=0.05, atol=0.05)


@pytest.mark.parametrize("h, w, stride", [(8, 8, 1), (8, 6, 2), (7, 5, 2), (9, 9, 3), (1, 1, 2)])
@pytest.mark.parametrize("dtype", [tf.float32, tf.bfloat16])
def test_pointwise_conv_equals_tensorflows_convolution_and_gradients(h, w, stride, dtype):
    """Against TensorFlow's convolution in float32 on the same (rounded) values: in bfloat16,
    TensorFlow's own weight gradient is not the reference, since on a CPU without bfloat16
    instructions (AVX2) it is 5% off (accumulated in bfloat16), where ours is within its
    rounding."""
    x = tf.cast(tf.random.normal((3, h, w, 6), seed=3), dtype)
    kernel = tf.cast(tf.random.normal((1, 1, 6, 5), seed=4), dtype)
    dy = tf.cast(tf.random.normal((3, -(-h // stride), -(-w // stride), 5), seed=5), dtype)
    results = []
    for conv, cast in ((lambda x, k: tf.nn.conv2d(x, k, stride, "SAME"), tf.float32),
                       (lambda x, k: pointwise_conv(x, k, (stride, stride)), dtype)):
        xs, ks, dys = (tf.cast(t, cast) for t in (x, kernel, dy))
        with tf.GradientTape() as tape:
            tape.watch([xs, ks])
            y = conv(xs, ks)
        results.append([y, *tape.gradient(y, [xs, ks], output_gradients=dys)])
    tol = 1e-5 if dtype == tf.float32 else 2e-2
    for theirs, ours in zip(*results):
        assert ours.dtype == dtype and ours.shape == theirs.shape
        theirs = theirs.numpy()
        np.testing.assert_allclose(tf.cast(ours, tf.float32).numpy(), theirs, rtol=tol,
                                   atol=tol * max(4.0, float(np.abs(theirs).max()) / 4))


@pytest.mark.parametrize("shape, strides", [((2, 8, 6, 3), (2, 2)), ((2, 9, 6, 3), (2, 3)),
                                            ((2, 4, 4, 3), (1, 1)), ((1, 6, 6, 2), (3, 2))])
def test_subsample_is_a_strided_slice(shape, strides):
    x = tf.reshape(tf.range(np.prod(shape), dtype=tf.float32), shape)
    np.testing.assert_array_equal(subsample(x, strides).numpy(),
                                  x[:, ::strides[0], ::strides[1], :].numpy())


def _kernel_gradient_ops(layer, x, training):
    """The op types of the graph that computes ``layer``'s kernel gradient on ``x``."""
    @tf.function
    def grad(x):
        with tf.GradientTape() as tape:
            y = tf.cast(layer(x, training=training), tf.float32)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, layer.kernel.value)
    graph = grad.get_concrete_function(tf.TensorSpec(x.shape, x.dtype)).graph
    return {op.type for op in graph.get_operations()}, grad(x)


def test_bfloat16_training_computes_1x1_weight_gradients_as_a_matmul():
    """The 1x1 path is taken exactly where the docstring says (bfloat16 training of a 1x1
    convolution, on a CPU), and its gradient is the same as oneDNN's kernel's."""
    if devices.current().gpu:
        pytest.skip("the path is CPU-only")
    x = tf.random.normal((2, 8, 8, 16), seed=6)
    grads = {}
    for kernel, policy, training, expect_matmul in [
            (1, "mixed_bfloat16", True, True), (1, "mixed_bfloat16", False, False),
            (1, "float32", True, False), (3, "mixed_bfloat16", True, False)]:
        layer = Conv2D(8, kernel, strides=2, padding="same", use_bias=False, dtype=policy)
        layer.build((None, 8, 8, 16))
        layer.kernel.assign(np.random.RandomState(kernel).normal(size=layer.kernel.shape))
        types, grad = _kernel_gradient_ops(layer, x, training)
        assert ("Conv2DBackpropFilter" not in types) == expect_matmul, (kernel, policy, training)
        assert ("MatMul" in types) == expect_matmul, (kernel, policy, training)
        grads[(kernel, policy, training)] = grad.numpy()
    exact = grads[(1, "float32", True)]
    for training in (True, False):  # bfloat16 against float32, with both paths
        np.testing.assert_allclose(grads[(1, "mixed_bfloat16", training)], exact,
                                   rtol=0.02, atol=0.02 * np.abs(exact).max())


def test_a_gpu_keeps_cudnns_weight_gradient_in_every_dtype():
    """The matmul path works around oneDNN's CPU kernels: with a GPU standing in, a bfloat16 or
    float16 1x1 convolution's graph is the plain Conv2DBackpropFilter that cuDNN runs."""
    x = tf.random.normal((2, 8, 8, 16), seed=6)
    with devices.standing_in(devices.Devices(0, "stand-in GPU", 1)):
        for policy in ("mixed_bfloat16", "mixed_float16"):
            layer = Conv2D(8, 1, strides=2, padding="same", use_bias=False, dtype=policy)
            layer.build((None, 8, 8, 16))
            types, _ = _kernel_gradient_ops(layer, x, True)
            assert "Conv2DBackpropFilter" in types and "MatMul" not in types, policy
