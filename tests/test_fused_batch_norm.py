"""common/layers/fused_batch_norm.py gives Keras' results with TensorFlow's fused kernel."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from common.layers.fused_batch_norm import FusedBatchNormalization

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _pair(axis, **kw):
    ref = keras.layers.BatchNormalization(axis=axis, epsilon=1e-5, momentum=0.9, **kw)
    fused = FusedBatchNormalization(axis=axis, epsilon=1e-5, momentum=0.9, **kw)
    return ref, fused


@pytest.mark.parametrize("axis", [-1, 1])
def test_matches_keras_in_training_and_inference(axis):
    x = tf.random.normal((8, 6, 5, 4), mean=2.0, stddev=3.0, seed=1)
    if axis == 1 and not tf.config.list_physical_devices("GPU"):
        pytest.skip("NCHW fused batch norm runs on a GPU only")
    ref, fused = _pair(axis)
    for layer in (ref, fused):
        layer.build(x.shape)
        layer.gamma.assign(tf.linspace(0.5, 2.0, 4))
        layer.beta.assign(tf.linspace(-1.0, 1.0, 4))
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_ref, y_fused = ref(x, training=True), fused(x, training=True)
        l_ref, l_fused = tf.reduce_sum(y_ref ** 3), tf.reduce_sum(y_fused ** 3)
    np.testing.assert_allclose(y_fused, y_ref, rtol=1e-4, atol=1e-4)
    for a, b in zip(tape.gradient(l_fused, [x, fused.gamma, fused.beta]),
                    tape.gradient(l_ref, [x, ref.gamma, ref.beta])):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(fused.moving_mean, ref.moving_mean, rtol=1e-5, atol=1e-6)
    n = 8 * 6 * 5  # the fused kernel updates with the unbiased batch variance
    expected_var = 0.9 + 0.1 * (ref.moving_variance.numpy() - 0.9) / 0.1 * n / (n - 1)
    np.testing.assert_allclose(fused.moving_variance, expected_var, rtol=1e-4)
    np.testing.assert_allclose(fused(x, training=False),
                               keras.ops.convert_to_numpy(ref.__class__.call(fused, x, False)),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_output_dtype_and_float32_variables(policy):
    layer = FusedBatchNormalization(dtype=policy)
    x = tf.cast(tf.random.normal((4, 3, 3, 8)), layer.compute_dtype)
    y = layer(x, training=True)
    assert y.dtype == layer.compute_dtype and layer.moving_mean.dtype == "float32"
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(tf.cast(y, tf.float32))))


def test_other_ranks_and_masks_use_keras_path():
    layer = FusedBatchNormalization()
    y = layer(tf.random.normal((4, 7)), training=True)  # 2-D: Keras' own implementation
    assert y.shape == (4, 7)
