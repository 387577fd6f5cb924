"""Transformer-XL's relative positional attention with memory (NVIDIA's TF1 ``model.py``).

Shapes are batch-major here: h (B, Q, D) for the current segment, mem (B, M, D) for the cached
inputs of this layer, K = M + Q keys. For head n, query i and key j (j counts from the oldest
memory position)::

    score[i, j] = ((q_i + r_w_bias) . k_j + (q_i + r_r_bias) . r_{M + i - j}) / sqrt(d_head)

where r_d is the projected sinusoidal embedding of the distance d (clamped to ``clamp_len``).
The relative-shift trick computes the second term for every (i, j) from one (Q, K) product
against the embeddings ordered by decreasing distance K-1 .. 0; the entries it wraps around are
exactly those the causal mask hides. Masked scores are -1e30 before a float32 softmax.
"""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers


def positional_embedding(klen: int, d_model: int, clamp_len: int = -1):
    """(klen, d_model) sin/cos embeddings of the distances klen-1 .. 0 (concatenated, not
    interleaved), distances clamped to ``clamp_len`` when it is positive."""
    pos = tf.range(klen - 1, -1, -1, dtype=tf.float32)
    if clamp_len > 0:
        pos = tf.minimum(pos, float(clamp_len))
    inv_freq = 1.0 / (10000 ** (tf.range(0, d_model, 2, dtype=tf.float32) / d_model))
    angles = pos[:, None] * inv_freq[None, :]
    return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


def rel_shift(x):
    """(B, N, Q, K) scores against distances K-1..0 -> scores against distance M + i - j."""
    b, n, q, k = tf.unstack(tf.shape(x))
    x = tf.pad(x, [[0, 0], [0, 0], [0, 0], [1, 0]])  # (B, N, Q, K + 1)
    x = tf.reshape(x, [b, n, k + 1, q])[:, :, 1:, :]
    return tf.reshape(x, [b, n, q, k])


def attention_mask(qlen: int, mlen: int, same_length: bool = False):
    """(Q, M + Q) bool, True where query i may NOT see key j: the future of the segment and,
    with ``same_length``, the oldest keys too, so that every query sees exactly M + 1 keys.
    Memory positions are otherwise all visible (zero memory included, as in NVIDIA's code)."""
    i = tf.range(qlen)[:, None]
    j = tf.range(mlen + qlen)[None, :]
    masked = j > i + mlen
    if same_length:
        masked = masked | (j < i)
    return masked


class RelPartialLearnableAttention(layers.Layer):
    """One attention sublayer: post-layer-norm residual block, as NVIDIA's base model has it."""

    def __init__(self, n_head: int, d_head: int, dropatt: float = 0.0, dropout: float = 0.0,
                 init_std: float = 0.02, epsilon: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        self.n_head, self.d_head = n_head, d_head
        init = keras.initializers.RandomNormal(stddev=init_std)
        self.qkv = layers.Dense(3 * n_head * d_head, use_bias=False, kernel_initializer=init,
                                name="qkv")
        self.r_net = layers.Dense(n_head * d_head, use_bias=False, kernel_initializer=init,
                                  name="r")
        self.o_net = None  # built with d_model
        self.drop_att, self.drop = layers.Dropout(dropatt), layers.Dropout(dropout)
        # Layer norm in float32 under mixed precision; epsilon 1e-12 as tf.contrib's.
        self.norm = layers.LayerNormalization(epsilon=epsilon, dtype="float32", name="norm")
        self._init = init

    def build(self, input_shape):
        d_model = input_shape[-1]
        self.o_net = layers.Dense(d_model, use_bias=False, kernel_initializer=self._init, name="o")
        self.r_w_bias = self.add_weight(name="r_w_bias", shape=(self.n_head, self.d_head),
                                        initializer=self._init)
        self.r_r_bias = self.add_weight(name="r_r_bias", shape=(self.n_head, self.d_head),
                                        initializer=self._init)

    def call(self, h, mem, pos_emb, mask, training=None):
        """h (B, Q, D), mem (B, M, D), pos_emb (K, D), mask (Q, K) bool -> (B, Q, D)."""
        b, q = tf.shape(h)[0], tf.shape(h)[1]
        n, d = self.n_head, self.d_head
        cat = tf.concat([tf.cast(mem, h.dtype), h], axis=1)  # (B, K, D)
        k_len = tf.shape(cat)[1]
        heads = tf.reshape(self.qkv(cat), [b, k_len, 3, n, d])
        w_q = heads[:, -q:, 0]  # (B, Q, N, d): queries of the current segment only
        w_k, w_v = heads[:, :, 1], heads[:, :, 2]  # (B, K, N, d)
        r_k = tf.reshape(self.r_net(tf.cast(pos_emb, h.dtype)), [k_len, n, d])  # (K, N, d)
        rw = tf.cast(self.r_w_bias, w_q.dtype)
        rr = tf.cast(self.r_r_bias, w_q.dtype)
        ac = tf.einsum("bind,bjnd->bnij", w_q + rw, w_k)  # (B, N, Q, K)
        bd = rel_shift(tf.einsum("bind,jnd->bnij", w_q + rr, r_k))
        scores = tf.cast(ac + bd, tf.float32) * (d ** -0.5)
        scores = tf.where(mask[None, None], -1e30, scores)
        prob = self.drop_att(tf.nn.softmax(scores, axis=-1), training=training)
        vec = tf.einsum("bnij,bjnd->bind", tf.cast(prob, w_v.dtype), w_v)
        out = self.drop(self.o_net(tf.reshape(vec, [b, q, n * d])), training=training)
        return self.norm(tf.cast(out, tf.float32) + tf.cast(h, tf.float32))
