"""Transformer-XL base: exact parameter count, memory across segments, dtypes under AMP."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from conftest import dtype_policy

from txl.config import preset_config
from txl.model import TiedEmbedding, TransformerXL, TXLConfig

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _count(variables):
    return int(sum(np.prod(v.shape) for v in variables))


def test_base_model_has_191965658_parameters_at_wikitext103_size():
    model = TransformerXL(TXLConfig(vocab_size=267_735, mem_len=4))
    tokens = tf.zeros((1, 3), tf.int32)
    model(tokens, model.initial_mems(1), tokens)
    assert _count(model.trainable_variables) == 191_965_658


def test_a_segment_with_the_previous_in_memory_equals_both_scored_together():
    rng = np.random.default_rng(0)
    model = TransformerXL(preset_config("tiny", vocab_size=60, mem_len=6))
    x = tf.constant(rng.integers(0, 60, (2, 12)), tf.int32)
    y = tf.constant(rng.integers(0, 60, (2, 12)), tf.int32)
    empty = [tf.zeros((2, 0, 32)) for _ in range(2)]
    joint, _ = model(x, empty, y)
    first, mems = model(x[:, :6], empty, y[:, :6])
    second, mems2 = model(x[:, 6:], mems, y[:, 6:])
    np.testing.assert_allclose(first, joint[:, :6], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(second, joint[:, 6:], rtol=1e-4, atol=1e-4)
    assert [m.shape for m in mems2] == [(2, 6, 32)] * 2  # memory stays at mem_len


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_keeps_the_loss_and_layer_norm_in_float32(policy):
    """... and the memory in the compute dtype, which attention reads it in."""
    with dtype_policy(policy):
        model = TransformerXL(preset_config("tiny", vocab_size=60, mem_len=4))
        x = tf.zeros((2, 5), tf.int32)
        nll, mems = model(x, model.initial_mems(2), x)
        half = policy.split("_")[1]
        assert nll.dtype == tf.float32 and all(m.dtype == half for m in mems)
        assert model.attn[0].qkv.compute_dtype == half
        assert model.attn[0].norm.compute_dtype == "float32"
        assert model.embedding.embeddings.dtype == "float32"
        assert np.isfinite(nll.numpy()).all()


def test_the_table_is_never_autocast_and_its_lookup_gradient_sums_in_float32():
    """Read in a bfloat16 layer's autocast scope (as in the model), the table stays float32
    (a bfloat16 copy of Transformer-XL's 137 M parameters at every step, and back), the rows
    are the float32 table's rounded once, and 1,000 lookups of one word have gradient 1,000
    (a bfloat16 sum stops at 256)."""
    import keras

    class Outer(keras.layers.Layer):
        def __init__(self):
            super().__init__(dtype="mixed_bfloat16")
            self.emb = TiedEmbedding(10, 4, dtype="mixed_bfloat16")
            self.emb.build((None,))
            self.other = self.add_weight(shape=(4,), initializer="ones")  # autocast as usual

        def call(self, ids):
            assert tf.convert_to_tensor(self.other).dtype == tf.bfloat16
            assert tf.convert_to_tensor(self.emb.embeddings).dtype == tf.float32
            return self.emb(ids)

    outer = Outer()
    ids = tf.fill([1000], 3)
    with tf.GradientTape() as tape:
        rows = outer(ids)
        loss = tf.reduce_sum(tf.cast(rows, tf.float32))
    grad = tape.gradient(loss, outer.emb.embeddings)
    assert rows.dtype == tf.bfloat16 and grad.dtype == tf.float32
    np.testing.assert_array_equal(grad.numpy()[3], 1000.0)
    assert not grad.numpy()[[0, 1, 2, 4]].any()
    np.testing.assert_array_equal(
        rows.numpy()[0], tf.cast(outer.emb.embeddings.value[3], tf.bfloat16).numpy())


@pytest.mark.parametrize("dtype", [tf.bfloat16, tf.float16])
def test_dropout_masks_do_not_depend_on_the_compute_dtype(dtype):
    """One seed drops the same units under AMP as in float32; kept units are scaled by the
    inverse of the exact keep probability of the 16-bit threshold."""
    import keras

    from txl.dropout import Dropout

    x = tf.random.uniform((4, 33, 63), 1.0, 2.0)  # an odd number of units
    ref = Dropout(0.3, seed=7)(x, training=True).numpy()
    again = Dropout(0.3, seed=7)
    np.testing.assert_array_equal(again(x, training=True).numpy(), ref)  # seeded
    assert not np.array_equal(again(x, training=True).numpy() == 0, ref == 0)  # a new draw
    kept = ref != 0
    np.testing.assert_allclose(ref[kept], x.numpy()[kept] * 65536 / (65536 - round(0.3 * 65536)),
                               rtol=1e-6)
    low = Dropout(0.3, seed=7, dtype=keras.DTypePolicy(f"mixed_{dtype.name}"))
    y = low(tf.cast(x, dtype), training=True)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y.numpy() == 0, ref == 0)
    np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), ref, rtol=1e-2)
    np.testing.assert_array_equal(low(tf.cast(x, dtype), training=False).numpy(),
                                  tf.cast(x, dtype).numpy())
    with pytest.raises(ValueError, match="noise_shape"):
        Dropout(0.3, noise_shape=(4, 1, 64))


def test_dropout_drops_at_its_rate_and_the_two_halves_of_a_random_word_independently():
    from txl.dropout import Dropout

    dropped = Dropout(0.3, seed=3)(tf.ones((1000, 1000)), training=True).numpy() == 0
    assert abs(dropped.mean() - 0.3) < 0.003  # 1e6 units: 0.0005 standard deviation
    even, odd = dropped.reshape(-1, 2).T  # the two units drawn from one 32-bit word
    assert abs((even & odd).mean() - 0.09) < 0.003  # independent: 0.3 * 0.3
    ones = tf.ones((8, 8))
    np.testing.assert_array_equal(Dropout(0.0)(ones, training=True).numpy(), ones.numpy())


def test_a_memory_kept_in_bfloat16_scores_as_the_float32_memory_it_was_rounded_from():
    """The premise of keeping the memory in the compute dtype: attention reads it rounded, so
    a float32 memory and its bfloat16 rounding give the same outputs and the same new memory."""
    with dtype_policy("mixed_bfloat16"):
        model = TransformerXL(preset_config("tiny", vocab_size=60, mem_len=4))
        x = tf.constant(np.random.default_rng(0).integers(0, 60, (2, 5)), tf.int32)
        mems32 = [tf.random.normal((2, 4, model.cfg.d_model), seed=i) for i in range(2)]
        nll32, new32 = model(x, mems32, x)
        nll16, new16 = model(x, [tf.cast(m, tf.bfloat16) for m in mems32], x)
        np.testing.assert_array_equal(nll32.numpy(), nll16.numpy())
        for a, b in zip(new32, new16):
            np.testing.assert_array_equal(tf.cast(a, tf.float32).numpy(),
                                          tf.cast(b, tf.float32).numpy())


@pytest.mark.parametrize("half", ["bfloat16", "float16"])
def test_a_copy_with_16_bit_weights_gives_the_mixed_models_outputs_bit_for_bit(half):
    """Why inference under AMP may run on ``precision.compute_dtype_copy`` (the task's
    ``infers_in_compute_dtype``): every weight of the 16-bit layers is read rounded, the layer
    norms and the softmax's biases stay float32, so two segments' losses, memories and
    log-probabilities are the mixed model's, with weights that are not round numbers."""
    from common import precision

    cfg = preset_config("tiny", vocab_size=300, mem_len=4, cutoffs=(100, 200), dropout=0.0)

    def build():
        model = TransformerXL(cfg, name="transformerxl")
        model(tf.zeros((1, 2), tf.int32), model.initial_mems(1), tf.zeros((1, 2), tf.int32))
        return model

    rng = np.random.default_rng(0)
    with dtype_policy(f"mixed_{half}"):
        mixed = build()
        for v in mixed.weights:  # no zero biases, no unit gains
            v.assign(v.numpy() + rng.normal(0, 0.05, v.shape).astype(np.float32))
        copy = precision.compute_dtype_copy(build, mixed, half)
        kept = {v.path.split("/", 1)[1] for v in copy.weights if v.dtype == "float32"}
        assert kept == {f"layer{i}_{s}/norm/{w}" for i in range(2) for s in ("attn", "ff")
                        for w in ("gamma", "beta")} | {
            f"adaptive_softmax/{w}" for w in ("bias", "cluster_W", "cluster_b")}
        assert copy.embedding.embeddings.dtype == copy.attn[0].qkv.kernel.dtype == half
        x, y = (tf.constant(rng.integers(0, 300, (3, 5)), tf.int32) for _ in range(2))
        mems = mixed.initial_mems(3)
        for _ in range(2):
            (a, mems_a), (b, mems_b) = mixed(x, mems, y), copy(x, mems, y)
            np.testing.assert_array_equal(a.numpy(), b.numpy())
            for m_a, m_b in zip(mems_a, mems_b):
                np.testing.assert_array_equal(tf.cast(m_a, tf.float32).numpy(),
                                              tf.cast(m_b, tf.float32).numpy())
            mems = mems_a
        np.testing.assert_array_equal(mixed.log_prob(x, mems)[0].numpy(),
                                      copy.log_prob(x, mems)[0].numpy())
        with pytest.raises(RuntimeError, match="differ in name or shape"):
            precision.compute_dtype_copy(
                lambda: TransformerXL(dataclasses.replace(cfg, n_layer=1), name="transformerxl"),
                mixed, half)
