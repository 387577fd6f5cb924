"""common.conv2d.Conv2D: Keras' convolution, with bfloat16 weight gradients that are right where
oneDNN's bfloat16 kernel is not (an input narrower than the stride, ``same`` padding)."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from common.conv2d import Conv2D, same_padding

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
