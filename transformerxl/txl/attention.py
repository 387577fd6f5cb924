"""Transformer-XL's relative positional attention with memory (NVIDIA's TF1 ``model.py``).

Shapes are batch-major here: h (B, Q, D) for the current segment, mem (B, M, D) for the cached
inputs of this layer, K = M + Q keys. For head n, query i and key j (j counts from the oldest
memory position)::

    score[i, j] = ((q_i + r_w_bias) . k_j + (q_i + r_r_bias) . r_{M + i - j}) / sqrt(d_head)

where r_d is the projected sinusoidal embedding of the distance d (clamped to ``clamp_len``).
The relative-shift trick computes the second term for every (i, j) from one (Q, K + 1) product
against the embeddings ordered by decreasing distance K .. 0; the entries it wraps around are
exactly those the causal mask hides. Masked scores get -1e30 before the softmax (float32, or
bfloat16 with a float32 gradient: ``attention_softmax``).

Laid out for a CPU's or GPU's matmul kernels, which is what the (B, N, Q, K) score tensors make
matter: heads are made head-major once, so every product is a plain batched matmul; the scale is
applied to the queries, the mask is an added bias (selected, in bfloat16), and the shift is a
single strided copy, with the same results (the time it saved: docs/performance/
transformerxl.md).

Keys and values, over all K = M + Q positions, come out of their projection already head-major
and transposed, (B, N, d, K), as the kernel's transpose times each row's (K, D) inputs
transposed (one matmul batched over B with the kernel broadcast); the score and value products
read them as they are. Projected as (B K, N d) they needed two (B, K, N, d) transposes per
layer, the largest copies of an inference step with 640 positions of memory (before and
after, per layer: docs/performance/transformerxl.md).
"""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers

from common import graph
from common.layers.bias import add_bias
from common.runtime import devices
from txl.dropout import Dropout


def positional_embedding(klen: int, d_model: int, clamp_len: int = -1):
    """(klen, d_model) sin/cos embeddings of the distances klen-1 .. 0 (concatenated, not
    interleaved), distances clamped to ``clamp_len`` when it is positive."""
    pos = tf.range(klen - 1, -1, -1, dtype=tf.float32)
    if clamp_len > 0:
        pos = tf.minimum(pos, float(clamp_len))
    inv_freq = 1.0 / (10000 ** (tf.range(0, d_model, 2, dtype=tf.float32) / d_model))
    angles = pos[:, None] * inv_freq[None, :]
    return tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)


@tf.custom_gradient
def rel_shift(x):
    """(B, N, Q, K + 1) scores against distances K..0 -> (B, N, Q, K) against distance
    M + i - j. Row i of the result is row i of ``x`` from column Q - i on, so all rows are read
    from one flat view of each head's (Q, K + 1) block starting at Q with a stride of K: one
    copy forwards and one backwards. Column 0 (distance K) is never read; the entries past the
    causal diagonal come from the next row and are masked.

    The gradient is the flat view with Q zeros in front (a concatenation). TensorFlow's own
    gradient of the slice, ``StridedSliceGrad``, wrote the same values an order of magnitude
    slower on a CPU, a tenth of a bfloat16 training step's op time (docs/performance/
    transformerxl.md)."""
    b, n, q, k1 = (x.shape[i] if x.shape[i] is not None else tf.shape(x)[i] for i in range(4))
    shifted = tf.reshape(tf.reshape(x, [b, n, q * k1])[:, :, q:], [b, n, q, k1 - 1])

    def grad(dy):
        flat = tf.reshape(dy, [b, n, q * (k1 - 1)])
        return tf.reshape(tf.concat([tf.zeros([b, n, q], dy.dtype), flat], axis=2),
                          [b, n, q, k1])
    return shifted, grad


def attention_softmax(scores, mask):
    """softmax over the keys (last axis) of ``scores`` with -1e30 where ``mask`` (broadcast) is
    True, in ``scores``' dtype.

    Computed in float32 (with float16 scores, whose range -1e30 and large scores exceed), except
    for bfloat16 scores: bfloat16 has float32's range, and oneDNN's bfloat16 softmax computes in
    float32 inside, so the probabilities come out as the float32 softmax of the same scores
    rounded to bfloat16 (to the bit on TensorFlow 2.21; on 2.17, NGC 25.02's, a fifth of them
    one bfloat16 unit apart) - without the two (B, N, Q, K) casts around it, a third of
    the attention's non-matmul time in AMP inference, and with the mask selected, not added.
    Its gradient is not TensorFlow's bfloat16 one, whose row sum of dy * y in bfloat16 is up to
    1.5 times a row's largest gradient off where the softmax is peaked, but the float32 one,
    from float32 probabilities recomputed from the scores inside one XLA computation (its
    time against the float32 softmax with its casts: docs/performance/transformerxl.md).
    On a CPU without bfloat16 instructions, TensorFlow's bfloat16 softmax computes in bfloat16
    (``devices.Capabilities.bfloat16_softmax_in_float32``): there it is float32's, cast."""
    if scores.dtype == tf.bfloat16 and devices.current().bfloat16_softmax_in_float32:
        return _softmax_bf16(scores, mask)
    bias = tf.where(mask, -1e30, 0.0)  # float32, added: no select in the gradient
    return tf.cast(tf.nn.softmax(tf.cast(scores, tf.float32) + bias, axis=-1), scores.dtype)


@tf.custom_gradient
def _softmax_bf16(x, mask):
    y = tf.nn.softmax(tf.where(mask, tf.constant(-1e30, x.dtype), x), axis=-1)
    return y, lambda dy: (_softmax_grad(x, mask, dy), None)


@graph.function(jit_compile=True)
def _softmax_grad(x, mask, dy):
    """The gradient of the masked softmax of x at dy, in float32 from the recomputed
    probabilities (zero where masked)."""
    y = tf.nn.softmax(tf.where(mask, -1e30, tf.cast(x, tf.float32)), axis=-1)
    dy = tf.cast(dy, tf.float32)
    return tf.cast((dy - tf.reduce_sum(dy * y, axis=-1, keepdims=True)) * y, x.dtype)


def attention_mask(qlen: int, mlen: int, same_length: bool = False):
    """(Q, M + Q) bool, True where query i may NOT see key j: the future of the segment and,
    with ``same_length``, the oldest keys too, so that every query sees exactly M + 1 keys.
    Memory positions are otherwise all visible (zero memory included, as in NVIDIA's code)."""
    qlen, mlen = tf.cast(qlen, tf.int64), tf.cast(mlen, tf.int64)  # on a GPU, not its host
    i = tf.range(qlen)[:, None]
    j = tf.range(mlen + qlen)[None, :]
    masked = j > i + mlen
    if same_length:
        masked = masked | (j < i)
    return masked


def attention_mask_rows(qlen, lengths, mem_len: int, same_length: bool = False):
    """(B, 1, Q, mem_len + Q) bool: ``attention_mask`` for a memory of fixed length ``mem_len``
    whose first ``mem_len - lengths[b]`` positions of row b hold no memory yet (the state a
    server keeps per sequence: zeros to start, filling up as segments pass). Row b masks what
    ``attention_mask(Q, lengths[b], same_length)`` masks over its real keys, and the empty
    positions: the distances between queries and real keys are the same, so the attention
    equals that over the real memory alone."""
    qlen = tf.cast(qlen, tf.int64)
    i = tf.range(qlen)[None, :, None]
    j = tf.range(mem_len + qlen)[None, None, :]
    empty = mem_len - tf.cast(lengths, tf.int64)[:, None, None]  # (B, 1, 1)
    masked = (j > i + mem_len) | (j < empty + (i if same_length else 0))
    return masked[:, None]


class RelPartialLearnableAttention(layers.Layer):
    """One attention sublayer: post-layer-norm residual block, as NVIDIA's base model has it."""

    def __init__(self, n_head: int, d_head: int, dropatt: float = 0.0, dropout: float = 0.0,
                 init_std: float = 0.02, epsilon: float = 1e-12, **kwargs):
        super().__init__(**kwargs)
        self.n_head, self.d_head = n_head, d_head
        self.init_std = init_std
        self.qkv = layers.Dense(3 * n_head * d_head, use_bias=False, name="qkv",
                                kernel_initializer=self._init())
        self.r_net = layers.Dense(n_head * d_head, use_bias=False, name="r",
                                  kernel_initializer=self._init())
        self.o_net = None  # built with d_model
        self.drop_att, self.drop = Dropout(dropatt), Dropout(dropout)
        # Layer norm in float32 under mixed precision; epsilon 1e-12 as tf.contrib's.
        self.norm = layers.LayerNormalization(epsilon=epsilon, dtype="float32", name="norm")

    def _init(self):
        """N(0, init_std), a new instance per weight: one shared instance gives the same values
        to every weight of one size (r_w_bias and r_r_bias were equal)."""
        return keras.initializers.RandomNormal(stddev=self.init_std)

    def build(self, input_shape):
        d_model = input_shape[-1]
        self.o_net = layers.Dense(d_model, use_bias=False, name="o",
                                  kernel_initializer=self._init())
        self.qkv.build((None, d_model))  # its kernel is read in three parts by call
        self.r_w_bias = self.add_weight(name="r_w_bias", shape=(self.n_head, self.d_head),
                                        initializer=self._init())
        self.r_r_bias = self.add_weight(name="r_r_bias", shape=(self.n_head, self.d_head),
                                        initializer=self._init())

    def call(self, h, mem, pos_emb, mask, training=None):
        """h (B, Q, D), mem (B, M, D), pos_emb (K, D), mask (Q, K) or (B, 1, Q, K) bool ->
        (B, Q, D)."""
        b, q = tf.shape(h)[0], tf.shape(h)[1]
        n, d = self.n_head, self.d_head
        dm = h.shape[-1]
        cat = tf.concat([tf.cast(mem, h.dtype), h], axis=1)  # (B, K, D)
        k_len = tf.shape(cat)[1]

        def head_major(y, length):  # (B L, N d) -> (B, N, L, d)
            return tf.transpose(tf.reshape(y, [b, length, n, d]), [0, 2, 1, 3])

        def heads_t(w):  # (B, K, D) x (D, N d) -> (B, N, d, K): w^T cat^T, batched over B
            return tf.reshape(tf.matmul(tf.transpose(w)[None], cat, transpose_b=True),
                              [b, n, d, k_len])

        # The qkv kernel's columns are q | k | v. Queries only for the current segment; keys
        # and values over memory and segment, computed transposed (see the module's docstring).
        # The scale 1 / sqrt(d) is applied to the queries' kernel and biases, not to the
        # (B, N, Q, K) scores.
        scale = d ** -0.5
        w_q, w_k, w_v = tf.split(tf.cast(self.qkv.kernel, h.dtype), 3, axis=1)
        queries = tf.matmul(tf.reshape(h, [-1, dm]), w_q * tf.cast(scale, h.dtype))  # (B Q, N d)
        k_t, v_t = heads_t(w_k), heads_t(w_v)
        # The two biased queries, added while (B Q, N d), so that each bias's gradient is one
        # sum over rows (added to the head-major queries, it was a slower sum over two axes).
        q_w, q_r = (head_major(add_bias(queries, tf.reshape(rb * scale, [-1])), q)
                    for rb in (self.r_w_bias, self.r_r_bias))
        # Distances K..0: K + 1 rows, the first (never read by rel_shift) zero.
        r = tf.pad(self.r_net(tf.cast(pos_emb, h.dtype)), [[1, 0], [0, 0]])
        r_k = tf.transpose(tf.reshape(r, [k_len + 1, n, d]), [1, 0, 2])  # (N, K + 1, d)
        ac = tf.matmul(q_w, k_t)  # (B, N, Q, K)
        bd = rel_shift(tf.matmul(q_r, r_k[None], transpose_b=True))
        prob = self.drop_att(attention_softmax(ac + bd, mask), training=training)
        vec = tf.matmul(prob, v_t, transpose_b=True)  # (B, N, Q, d)
        vec = tf.reshape(tf.transpose(vec, [0, 2, 1, 3]), [b, q, n * d])
        out = self.drop(self.o_net(vec), training=training)
        return self.norm(tf.cast(out, tf.float32) + tf.cast(h, tf.float32))
