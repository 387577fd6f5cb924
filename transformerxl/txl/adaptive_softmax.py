"""Adaptive softmax tied to the embedding, as NVIDIA's Transformer-XL base has it (div_val 1, no
projections): the head scores the first ``cutoffs[0]`` words plus one logit per tail cluster,
and a word of tail cluster k has log p = head log p(cluster k) + log softmax within cluster k.

Weights: every word's output vector is its embedding row (tied). Biases: one per word (each
cluster's its own, zero-initialised) plus ``cluster_W`` (clusters, D) and ``cluster_b`` for the
cluster logits, zero-initialised. With cutoffs (19997, 39997, 199997) at 267,735 words that is
267,735 + 3 x 512 + 3 parameters beside the embedding. Everything here runs in float32.
"""
from __future__ import annotations

import tensorflow as tf
from keras import layers


class AdaptiveSoftmax(layers.Layer):
    def __init__(self, vocab_size: int, cutoffs=(), **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.vocab_size = vocab_size
        self.cutoffs = [int(c) for c in cutoffs]
        if self.cutoffs != sorted(set(self.cutoffs)) or (self.cutoffs and not
                                                          0 < self.cutoffs[0] and
                                                          self.cutoffs[-1] < vocab_size):
            raise ValueError(f"cutoffs {cutoffs} must increase strictly within (0, {vocab_size})")
        self.bounds = [0, *self.cutoffs, vocab_size]

    @property
    def n_clusters(self) -> int:
        return len(self.cutoffs)

    def build(self, input_shape):
        d = input_shape[-1]
        self.bias = self.add_weight(name="bias", shape=(self.vocab_size,), initializer="zeros")
        if self.n_clusters:
            self.cluster_w = self.add_weight(name="cluster_W", shape=(self.n_clusters, d),
                                             initializer="zeros")
            self.cluster_b = self.add_weight(name="cluster_b", shape=(self.n_clusters,),
                                             initializer="zeros")

    def _head_logp(self, h, table):
        c0 = self.bounds[1]
        logits = tf.matmul(h, table[:c0], transpose_b=True) + self.bias[:c0]
        if self.n_clusters:
            logits = tf.concat([logits, tf.matmul(h, self.cluster_w, transpose_b=True)
                                + self.cluster_b], axis=-1)
        return tf.nn.log_softmax(logits, axis=-1)  # (N, c0 + clusters)

    def _tail_logp(self, h, table, k):
        lo, hi = self.bounds[k + 1], self.bounds[k + 2]
        return tf.nn.log_softmax(tf.matmul(h, table[lo:hi], transpose_b=True)
                                 + self.bias[lo:hi], axis=-1)

    def log_prob(self, h, table):
        """(N, vocab) log-probabilities of every word (for tests and generation)."""
        h, table = tf.cast(h, tf.float32), tf.cast(table, tf.float32)
        head = self._head_logp(h, table)
        c0 = self.bounds[1]
        parts = [head[:, :c0]]
        for k in range(self.n_clusters):
            parts.append(head[:, c0 + k:c0 + k + 1] + self._tail_logp(h, table, k))
        return tf.concat(parts, axis=-1)

    def call(self, h, table, targets):
        """Negative log-likelihood (N,) of ``targets`` (N,) int, computing each tail cluster's
        softmax only for the tokens that fall in it."""
        h, table = tf.cast(h, tf.float32), tf.cast(table, tf.float32)
        targets = tf.cast(targets, tf.int32)
        head = self._head_logp(h, table)
        c0 = self.bounds[1]
        head_index = targets
        for k in range(self.n_clusters):  # tail words are scored by their cluster in the head
            in_k = (targets >= self.bounds[k + 1]) & (targets < self.bounds[k + 2])
            head_index = tf.where(in_k, c0 + k, head_index)
        nll = -tf.gather(head, head_index, batch_dims=1)
        for k in range(self.n_clusters):
            lo, hi = self.bounds[k + 1], self.bounds[k + 2]
            idx = tf.where((targets >= lo) & (targets < hi))[:, 0]
            tail = self._tail_logp(tf.gather(h, idx), table, k)
            picked = tf.gather(tail, tf.gather(targets, idx) - lo, batch_dims=1)
            nll = tf.tensor_scatter_nd_sub(nll, idx[:, None], picked)
        return nll
