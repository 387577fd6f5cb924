"""Transformer-XL base as NVIDIA's TF1 ``model.py`` builds it (notes C.1-C.3), batch-major.

tokens (B, Q) -> embedding x sqrt(d_model) -> dropout -> n_layer x [relative attention with the
layer's memory -> position-wise feed-forward], each a post-layer-norm residual block (epsilon
1e-12, in float32) -> dropout -> tied adaptive softmax. The memory of layer l is that layer's
*input* for the last ``mem_len`` positions, with no gradient; it starts as zeros of length
``mem_len`` (attended to, as in NVIDIA's code), or empty when ``mem_len`` is 0.

At d_model 512, 16 layers, 8 x 64 heads, d_inner 2048, 267,735 words and cutoffs
(19997, 39997, 199997) the model has 191,965,658 parameters.
"""
from __future__ import annotations

import keras
import tensorflow as tf
from keras import layers

from common.layers.bias import Dense
from txl.adaptive_softmax import AdaptiveSoftmax
from txl.attention import (
    RelPartialLearnableAttention,
    attention_mask,
    attention_mask_rows,
    positional_embedding,
)
from txl.config import TXLConfig
from txl.dropout import Dropout


class TiedEmbedding(layers.Embedding):
    """``keras.layers.Embedding`` (same variable, same name) whose lookup has a dense float32
    gradient (Horovod's ``sparse_as_dense`` at the source): the tied table's gradients from the
    lookup and from the softmax then add as two dense tensors, instead of TensorFlow
    concatenating both into one huge IndexedSlices (the out-of-memory
    kimiyoung/transformer-xl#120 reports).

    Its table is never autocast: read in the model's mixed-precision scope, Keras would cast
    all 137 M parameters to 16 bits for the lookup (whose rows' gradients it then summed in 16
    bits) and again, and back to float32, when the table is handed to the float32 softmax: 37%
    of an AMP inference step's op time on a CPU. Rows are gathered in float32 and then cast; the
    softmax casts each cluster's rows once, for its matmul. Inference under AMP runs a copy of
    the model whose table is 16-bit (``precision.compute_dtype_copy``): no casts at all."""

    def add_weight(self, *args, **kwargs):
        return super().add_weight(*args, **{**kwargs, "autocast": False})

    def call(self, ids):
        return tf.cast(_lookup(tf.convert_to_tensor(self.embeddings), ids), self.compute_dtype)


@tf.custom_gradient
def _lookup(table, ids):
    """``tf.gather(table, ids)`` with a dense gradient (see TiedEmbedding)."""
    def grad(dy):
        return tf.math.unsorted_segment_sum(dy, ids, tf.shape(table)[0]), None
    return tf.gather(table, ids), grad


def _length(x):
    return x.shape[1] if x.shape[1] is not None else tf.shape(x)[1]


def _first_kept(klen, mem_len):
    """Where the new memory starts in the keys: the last ``mem_len`` of ``klen`` are kept."""
    if isinstance(klen, int):
        return max(0, klen - mem_len)
    return tf.maximum(0, klen - mem_len)


class PositionwiseFF(layers.Layer):
    def __init__(self, d_model, d_inner, dropout, init_std, **kwargs):
        super().__init__(**kwargs)
        # A new initializer per kernel: ff2's kernel had ff1's values, reshaped.
        self.inner = Dense(d_inner, activation="relu", name="ff1",
                                  kernel_initializer=keras.initializers.RandomNormal(stddev=init_std))
        self.out = Dense(d_model, name="ff2",
                                kernel_initializer=keras.initializers.RandomNormal(stddev=init_std))
        self.drop1, self.drop2 = Dropout(dropout), Dropout(dropout)
        self.norm = layers.LayerNormalization(epsilon=1e-12, dtype="float32", name="norm")

    def call(self, x, training=None):
        """x (B, Q, D) -> (B, Q, D) float32. The two layers see (B Q, D) rows: on 3-D inputs
        their matmul is reshaped before the bias, and oneDNN's matmul + bias + ReLU fusion
        does not happen."""
        rows = tf.reshape(x, [-1, x.shape[-1]])
        y = self.drop2(self.out(self.drop1(self.inner(rows), training=training)),
                       training=training)
        return self.norm(tf.reshape(tf.cast(y, tf.float32), tf.shape(x)) + tf.cast(x, tf.float32))


class TransformerXL(keras.Model):
    def __init__(self, cfg: TXLConfig, **kwargs):
        super().__init__(**kwargs)
        self.cfg = cfg
        cutoffs = tuple(c for c in cfg.cutoffs if c < cfg.vocab_size)  # tiny vocabularies
        self.embedding = TiedEmbedding(
            cfg.vocab_size, cfg.d_model, name="embedding",
            embeddings_initializer=keras.initializers.RandomNormal(stddev=cfg.init_std))
        self.embedding.build((None, None))  # the softmax reads the table before any lookup
        self.drop = Dropout(cfg.dropout)
        self.attn = [RelPartialLearnableAttention(cfg.n_head, cfg.d_head, cfg.dropatt, cfg.dropout,
                                                  cfg.init_std, name=f"layer{i}_attn")
                     for i in range(cfg.n_layer)]
        self.ff = [PositionwiseFF(cfg.d_model, cfg.d_inner, cfg.dropout, cfg.init_std,
                                  name=f"layer{i}_ff") for i in range(cfg.n_layer)]
        self.softmax = AdaptiveSoftmax(cfg.vocab_size, cutoffs,
                                       matmul_dtype=self.embedding.compute_dtype,
                                       pad_multiple=cfg.pad_multiple,
                                       static_shapes=cfg.static_shapes, name="adaptive_softmax")

    def initial_mems(self, batch_size: int, mem_len: int | None = None):
        """n_layer zero memories (B, mem_len, d_model) in the compute dtype (see ``hidden``)."""
        mem_len = self.cfg.mem_len if mem_len is None else mem_len
        return [tf.zeros((batch_size, mem_len, self.cfg.d_model), self.compute_dtype)
                for _ in range(self.cfg.n_layer)]

    def empty_mems(self, batch_size: int):
        """n_layer memories of length 0, which grow up to mem_len (generation starts so)."""
        return self.initial_mems(batch_size, 0)

    def hidden(self, tokens, mems, training=None, mem_len=None, clamp_len=None,
               same_length=None, lengths=None):
        """(final hidden states (B, Q, D) float32, new memories) for one segment. ``mem_len``,
        ``clamp_len`` and ``same_length`` override the configuration's (evaluation uses its
        own: NVIDIA's 640, 400 and True).

        The memories are kept in the compute dtype (bfloat16 or float16 under AMP, as NVIDIA's
        PyTorch AMP keeps them in half precision): attention reads them in that dtype, so
        storing them rounded gives the same results as storing float32 and rounding at every
        read, and it halves the memory's bytes (what it changed in AMP inference:
        docs/performance/transformerxl.md).

        With ``lengths`` (B,) the memories are of fixed length ``mem_len``, row b's last
        ``lengths[b]`` positions real and the rest empty (``attention_mask_rows``): the answers
        are those of the real memory alone, and the new memories are again ``mem_len`` long
        (their real length: ``min(lengths + Q, mem_len)``). A server keeps such a memory per
        sequence in a tensor of one shape (Triton's implicit state, ``fixed_step``)."""
        cfg = self.cfg
        mem_len = cfg.mem_len if mem_len is None else mem_len
        clamp_len = cfg.clamp_len if clamp_len is None else clamp_len
        same_length = cfg.same_length if same_length is None else same_length
        q, m = _length(tokens), _length(mems[0])  # static when known (exported: dynamic)
        dtype = self.embedding.compute_dtype
        x = self.embedding(tokens) * tf.cast(cfg.d_model ** 0.5, dtype)
        x = self.drop(x, training=training)
        pos = self.drop(positional_embedding(m + q, cfg.d_model, clamp_len), training=training)
        mask = attention_mask(q, m, same_length) if lengths is None else \
            attention_mask_rows(q, lengths, m, same_length)
        new_mems = []
        for attn, ff, mem in zip(self.attn, self.ff, mems):
            cat = tf.concat([tf.cast(mem, self.compute_dtype), tf.cast(x, self.compute_dtype)],
                            axis=1)
            new_mems.append(tf.stop_gradient(cat[:, _first_kept(m + q, mem_len):]))
            x = ff(attn(x, mem, pos, mask, training=training), training=training)
        return self.drop(x, training=training), new_mems

    def call(self, tokens, mems, targets, training=None, mem_len=None, clamp_len=None,
             same_length=None):
        """(NLL (B, Q) float32 of ``targets``, new memories); overrides as ``hidden``'s."""
        h, new_mems = self.hidden(tokens, mems, training=training, mem_len=mem_len,
                                  clamp_len=clamp_len, same_length=same_length)
        b, q = tf.shape(h)[0], tf.shape(h)[1]
        # int64 ids: on a GPU, int32's reshapes and comparisons are host kernels
        nll = self.softmax(tf.reshape(h, [b * q, -1]), self.embedding.embeddings,
                           tf.reshape(tf.cast(targets, tf.int64), [-1]))
        return tf.reshape(nll, [b, q]), new_mems

    def log_prob(self, tokens, mems, mem_len=None, clamp_len=None, same_length=None):
        """(log-probabilities (B, Q, vocab) of the next word, new memories): for generation;
        overrides as ``hidden``'s."""
        h, new_mems = self.hidden(tokens, mems, training=False, mem_len=mem_len,
                                  clamp_len=clamp_len, same_length=same_length)
        b, q = tf.shape(h)[0], tf.shape(h)[1]
        lp = self.softmax.log_prob(tf.reshape(h, [b * q, -1]), self.embedding.embeddings)
        return tf.reshape(lp, [b, q, -1]), new_mems

    def fixed_step(self, tokens, targets, mems, lengths, clamp_len=None, same_length=None):
        """One segment over memories of fixed length (``hidden``'s ``lengths``): (NLL (B, Q) of
        ``targets``, log-probabilities (B, vocab) of the word after each row's last token, new
        memories of the same length, their real lengths (B,)). Its graph calls no nested
        function (the softmax's ``inline``): it is the one converted to ONNX."""
        mem_len = _length(mems[0])
        h, new_mems = self.hidden(tokens, mems, training=False, mem_len=mem_len,
                                  clamp_len=clamp_len, same_length=same_length, lengths=lengths)
        b, q = tf.shape(h)[0], tf.shape(h)[1]
        nll = self.softmax(tf.reshape(h, [b * q, -1]), self.embedding.embeddings,
                           tf.reshape(tf.cast(targets, tf.int64), [-1]), inline=True)
        logp = self.softmax.log_prob(h[:, -1], self.embedding.embeddings)
        new_lengths = tf.minimum(tf.cast(lengths, tf.int32) + tf.cast(q, tf.int32), mem_len)
        return tf.reshape(nll, [b, q]), logp, new_mems, new_lengths

    def next_log_prob(self, tokens, mems, mem_len=None, clamp_len=None, same_length=None):
        """(log-probabilities (B, vocab) of the word after each row's last token, new
        memories): ``log_prob``'s last position alone, the softmax over the vocabulary
        computed for that position only (for all of them it is B x Q x vocab floats: 14 GB
        for 16 segments of 832 tokens at WikiText-103's 267,735 words); overrides as
        ``hidden``'s."""
        h, new_mems = self.hidden(tokens, mems, training=False, mem_len=mem_len,
                                  clamp_len=clamp_len, same_length=same_length)
        return self.softmax.log_prob(h[:, -1], self.embedding.embeddings), new_mems
