"""Transformer-XL's relative attention against a reference written with explicit relative
positions (no shift trick), and the memory property: a segment scored with the previous one in
memory equals scoring both together where the spans match."""

import numpy as np
import pytest
import tensorflow as tf

from txl.attention import (
    RelPartialLearnableAttention,
    attention_mask,
    attention_softmax,
    positional_embedding,
    rel_shift,
)

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _reference(layer, h, mem, clamp_len, same_length):
    """Attention computed pair by pair from the distance M + i - j."""
    h, mem = h.astype(np.float64), mem.astype(np.float64)
    b, q, dm = h.shape
    m = mem.shape[1]
    n, d = layer.n_head, layer.d_head
    wqkv, wr, wo = (np.asarray(layer.qkv.kernel), np.asarray(layer.r_net.kernel),
                    np.asarray(layer.o_net.kernel))
    rw, rr = np.asarray(layer.r_w_bias), np.asarray(layer.r_r_bias)
    cat = np.concatenate([mem, h], axis=1)
    qkv = (cat @ wqkv).reshape(b, m + q, 3, n, d)
    qs, ks, vs = qkv[:, m:, 0], qkv[:, :, 1], qkv[:, :, 2]
    inv = 1.0 / (10000 ** (np.arange(0, dm, 2) / dm))
    out = np.zeros((b, q, n, d))
    for i in range(q):
        for hd in range(n):
            scores = np.full((b, m + q), -np.inf)
            for j in range(m + q):
                if j > i + m or (same_length and j < i):
                    continue
                dist = m + i - j
                if clamp_len > 0:
                    dist = min(dist, clamp_len)
                r = (np.concatenate([np.sin(dist * inv), np.cos(dist * inv)]) @ wr).reshape(n, d)
                scores[:, j] = ((qs[:, i, hd] + rw[hd]) * ks[:, j, hd]).sum(-1) + \
                    ((qs[:, i, hd] + rr[hd]) * r[hd]).sum(-1)
            p = np.exp((scores - scores.max(-1, keepdims=True)) / np.sqrt(d))
            p /= p.sum(-1, keepdims=True)
            out[:, i, hd] = (p[:, :, None] * vs[:, :, hd]).sum(1)
    y = out.reshape(b, q, n * d) @ wo + h
    mu, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    return (y - mu) / np.sqrt(var + 1e-12)  # the layer norm's gamma 1 and beta 0 at init


@pytest.mark.parametrize("mlen, clamp_len, same_length", [(0, -1, False), (3, -1, False),
                                                          (4, 2, False), (3, -1, True)])
def test_relative_attention_equals_explicit_positions(mlen, clamp_len, same_length):
    rng = np.random.default_rng(0)
    b, q, dm = 2, 5, 16
    layer = RelPartialLearnableAttention(n_head=2, d_head=8, init_std=0.3)
    h = rng.normal(size=(b, q, dm)).astype(np.float32)
    mem = rng.normal(size=(b, mlen, dm)).astype(np.float32)
    pos = positional_embedding(mlen + q, dm, clamp_len)
    got = layer(h, mem, pos, attention_mask(q, mlen, same_length)).numpy()
    np.testing.assert_allclose(got, _reference(layer, h, mem, clamp_len, same_length),
                               rtol=1e-4, atol=1e-4)


def test_a_segment_with_the_previous_in_memory_equals_both_scored_together():
    rng = np.random.default_rng(1)
    layer = RelPartialLearnableAttention(n_head=2, d_head=4, init_std=0.3)
    x = rng.normal(size=(1, 8, 8)).astype(np.float32)
    empty = np.zeros((1, 0, 8), np.float32)
    both = layer(x, empty, positional_embedding(8, 8), attention_mask(8, 0)).numpy()
    second = layer(x[:, 4:], x[:, :4], positional_embedding(8, 8), attention_mask(4, 4)).numpy()
    np.testing.assert_allclose(second, both[:, 4:], rtol=1e-5, atol=1e-5)
    assert tf.reduce_all(attention_mask(2, 1, same_length=True) ==
                         tf.constant([[False, False, True], [True, False, False]]))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_rel_shift_and_its_gradient_equal_a_gather_of_the_distances(dtype):
    """Result [i, j] is input [i, Q - i + j] (distance M + i - j) wherever it is not masked; the
    hand-written gradient equals TensorFlow's gradient of that gather."""
    b, n, q, k = 2, 3, 4, 7
    x = tf.cast(tf.random.stateless_normal((b, n, q, k + 1), seed=(5, 6)), dtype)
    i, j = np.meshgrid(np.arange(q), np.arange(k), indexing="ij")
    visible = j <= i + (k - q)
    cols = np.where(visible, q - i + j, 0)
    weights = tf.cast(tf.random.stateless_normal((b, n, q, k), seed=(7, 8)), dtype) * visible

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        ours = rel_shift(x)
        ref = tf.experimental.numpy.take_along_axis(
            x, tf.broadcast_to(tf.constant(cols), (b, n, q, k)), axis=3)
        ours_sum, ref_sum = (tf.reduce_sum(tf.cast(y * weights, tf.float32)) for y in (ours, ref))
    np.testing.assert_array_equal(tf.cast(ours, tf.float32).numpy() * visible,
                                  tf.cast(ref, tf.float32).numpy() * visible)
    np.testing.assert_array_equal(tape.gradient(ours_sum, x).numpy(),
                                  tape.gradient(ref_sum, x).numpy())


def _softmax_case(seed):
    """Peaked and flat rows of bfloat16 scores (B, N, Q, K) with a causal mask, and an upstream
    gradient."""
    q, k = 16, 48
    spread = tf.reshape(tf.constant([0.5, 4.0, 12.0], tf.float32), (3, 1, 1, 1))
    scores = tf.cast(tf.random.stateless_normal((3, 2, q, k), seed=(seed, 1)) * spread,
                     tf.bfloat16)
    mask = attention_mask(q, k - q)
    dy = tf.cast(tf.random.stateless_normal((3, 2, q, k), seed=(seed, 2)), tf.bfloat16)
    return scores, mask, dy


def _bias(mask, dtype):
    return tf.where(mask, tf.constant(-1e30, dtype), tf.constant(0, dtype))


def _softmax_and_grad(fn, scores, mask, dy):
    with tf.GradientTape() as tape:
        tape.watch(scores)
        y = fn(scores, mask)
    return y, tape.gradient(y, scores, output_gradients=tf.cast(dy, y.dtype))


def test_bfloat16_attention_softmax_is_the_float32_one_rounded_with_a_float32_gradient():
    """bfloat16 scores: the probabilities are float32's rounded to bfloat16 (masked ones zero),
    and the gradient is float64's rounded to bfloat16, where TensorFlow's own bfloat16 softmax
    gradient is off by more than a row's largest gradient."""
    scores, mask, dy = _softmax_case(3)
    ref, ref_grad = _softmax_and_grad(
        lambda s, m: tf.nn.softmax(tf.cast(s, tf.float64) + _bias(m, tf.float64), axis=-1),
        scores, mask, dy)
    y, grad = _softmax_and_grad(attention_softmax, scores, mask, dy)
    assert y.dtype == grad.dtype == tf.bfloat16
    f32 = tf.nn.softmax(tf.cast(scores, tf.float32) + _bias(mask, tf.float32), axis=-1)
    # Within one bfloat16 unit of the float32 softmax rounded: TensorFlow 2.21's oneDNN gives
    # identical values, 2.17's (NGC 25.02) a unit apart for a fifth of them.
    np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(),
                               tf.cast(tf.cast(f32, tf.bfloat16), tf.float32).numpy(),
                               rtol=2 ** -7, atol=1e-30)
    assert not np.any(tf.cast(y, tf.float32).numpy()[..., attention_mask(16, 32).numpy()])
    # Errors as a share of the row's largest gradient, or of a thousandth of its largest dy
    # where the softmax is so peaked that all its gradients are smaller.
    scale = np.maximum(np.abs(ref_grad.numpy()).max(axis=-1, keepdims=True),
                       1e-3 * np.abs(tf.cast(dy, tf.float64).numpy()).max(axis=-1, keepdims=True))

    def error(g):
        return float(np.max(np.abs(tf.cast(g, tf.float64).numpy() - ref_grad.numpy()) / scale))

    _, tf_bf16_grad = _softmax_and_grad(
        lambda s, m: tf.nn.softmax(s + _bias(m, tf.bfloat16), axis=-1), scores, mask, dy)
    assert error(grad) <= 2 ** -7  # float64's gradient rounded to bfloat16, within an ulp
    assert error(tf_bf16_grad) > 0.1  # the case tells the two gradients apart (measured 1.49)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_attention_softmax_in_float32_for_other_dtypes(dtype):
    """float16 and float32 scores: float32's softmax (float16 cannot hold -1e30), in their dtype."""
    scores, mask, dy = _softmax_case(4)
    scores = tf.cast(scores, dtype)
    y = attention_softmax(scores, mask)
    assert y.dtype == dtype
    np.testing.assert_allclose(
        tf.cast(y, tf.float32).numpy(),
        tf.nn.softmax(tf.cast(scores, tf.float32) + _bias(mask, tf.float32), axis=-1).numpy(),
        rtol=1e-3 if dtype == "float16" else 1e-6, atol=1e-7)


@pytest.mark.parametrize("bf16_softmax_in_float32", [True, False])
def test_the_bfloat16_softmax_path_follows_the_device(bf16_softmax_in_float32, monkeypatch):
    """TensorFlow's bfloat16 softmax where it computes in float32 inside (a GPU, a CPU with
    bfloat16 instructions); float32's, cast, on a CPU without them (AVX2)."""
    from common.runtime import devices
    monkeypatch.setattr(devices.Capabilities, "bfloat16_softmax_in_float32",
                        property(lambda self: bf16_softmax_in_float32))
    scores, mask, _ = _softmax_case(5)

    @tf.function
    def f(s):
        return attention_softmax(s, mask)
    graph = f.get_concrete_function(scores).graph
    softmax = [op for op in graph.get_operations() if op.type == "Softmax"]
    assert len(softmax) == 1
    assert softmax[0].outputs[0].dtype == (tf.bfloat16 if bf16_softmax_in_float32
                                           else tf.float32)
    assert f(scores).dtype == tf.bfloat16
