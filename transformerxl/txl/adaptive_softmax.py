"""Adaptive softmax tied to the embedding, as NVIDIA's Transformer-XL base has it (div_val 1, no
projections): the head scores the first ``cutoffs[0]`` words plus one logit per tail cluster,
and a word of tail cluster k has log p = head log p(cluster k) + log softmax within cluster k.

Weights: every word's output vector is its embedding row (tied). Biases: one per word (each
cluster's its own, zero-initialised) plus ``cluster_W`` (clusters, D) and ``cluster_b`` for the
cluster logits, zero-initialised. With cutoffs (19997, 39997, 199997) at 267,735 words that is
267,735 + 3 x 512 + 3 parameters beside the embedding.

Precision: the logits' matmuls run in ``matmul_dtype`` (the policy's compute type: float16 or
bfloat16 under AMP); biases, the softmax and the loss are float32. With ``pad_multiple`` 8 (AMP
on a GPU) each softmax's output size is padded to a multiple of 8 for tensor cores (the last
cluster's 67,738 words become 67,744) by zero weight rows whose logits get a -1e30 bias: they
take no probability, so the loss is unchanged and no padded variable is stored. A CPU's kernels
do not need it: there, padding copied the last cluster's rows once more every step.
"""
from __future__ import annotations

import math

import tensorflow as tf
from keras import layers

from common import graph
from common.layers.bias import add_bias

TAIL_ROWS = 64  # the smallest number of rows a tail cluster's softmax is computed for


def tail_buckets(rows: int) -> list[int]:
    """The row counts a tail cluster's softmax is computed for when ``rows`` tokens are scored:
    64, 96, 128, 192, 256, 384, ... (each at most 1.5x the one before, so the extra rows are
    at most half), up to ``rows``. ``sparse_xent`` is compiled once per count used, a handful
    per cluster (a token count near a cluster's share of the text), where padding to
    multiples of 64 gave up to ``rows / 64`` shapes, each compiled during the first thousands
    of steps; and ``--xla`` can compile the whole step (a static shape per count)."""
    sizes, p = [], TAIL_ROWS
    while p < rows:
        sizes += [p, p * 3 // 2]
        p *= 2
    return sorted({min(s, rows) for s in sizes} | {rows})


def bucket_rows(n, rows):
    """The smallest of ``tail_buckets(rows)`` that holds ``n`` (int32 tensors; ``rows`` may be
    known only when the step runs): the next power of two of ceil(n / 64) times 64, or three
    quarters of that when they suffice, at most ``rows``. The power of two from a float log2,
    then put right by a step either way (the float may round across a power): no bitwise ops,
    which ONNX has only from opset 18 (the export's ``score`` and ``step`` run this)."""
    c = tf.maximum((n + TAIL_ROWS - 1) // TAIL_ROWS, 1)
    k = tf.math.ceil(tf.math.log(tf.cast(c, tf.float32)) / math.log(2.0))
    x = tf.cast(tf.pow(2.0, k), c.dtype)
    x = tf.where(x < c, x * 2, x)
    x = tf.where(x // 2 >= c, x // 2, x)
    p = x * TAIL_ROWS  # 64 x a power of two >= n
    three_quarters = p // 4 * 3
    p = tf.where((p >= 2 * TAIL_ROWS) & (three_quarters >= n), three_quarters, p)
    return tf.minimum(p, rows)


class AdaptiveSoftmax(layers.Layer):
    def __init__(self, vocab_size: int, cutoffs=(), matmul_dtype="float32", pad_multiple: int = 1,
                 static_shapes: bool = False, **kwargs):
        # autocast=False: Keras would cast every floating input to float32, a 16-bit table
        # (the copy of the model that inference runs, precision.compute_dtype_copy) too.
        super().__init__(dtype="float32", autocast=False, **kwargs)
        self.vocab_size = vocab_size
        self.matmul_dtype, self.pad_multiple = tf.as_dtype(matmul_dtype), pad_multiple
        self.static_shapes = static_shapes  # for XLA: see _tail_nll_static
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

    def _scores(self, h, weight, bias):
        """h W^T in ``matmul_dtype`` over W's rows and the float32 biases, both padded to
        ``pad_multiple`` rows on the way."""
        weight = tf.cast(weight, self.matmul_dtype)
        extra = -weight.shape[0] % self.pad_multiple
        if extra:
            weight = tf.pad(weight, [[0, extra], [0, 0]])
            bias = tf.concat([bias, tf.fill([extra], -1e30)], axis=0)
        return tf.matmul(tf.cast(h, self.matmul_dtype), weight, transpose_b=True), bias

    def _logits(self, h, weight, bias):
        """float32 h W^T + b over W's (padded) rows."""
        scores, bias = self._scores(h, weight, bias)
        return add_bias(tf.cast(scores, tf.float32), bias)

    def _log_softmax(self, h, weight, bias):
        """log softmax(h W^T + b) over W's rows."""
        return tf.nn.log_softmax(self._logits(h, weight, bias), axis=-1)[:, :weight.shape[0]]

    def _clusters(self, table):
        """[(weight rows, biases)] of the head's words and of each tail cluster, cut from the
        tied table by one split: its gradient is one concatenation, where a slice per cluster
        would each pad its gradient to the whole (vocab, D) table before they are summed."""
        sizes = [hi - lo for lo, hi in zip(self.bounds[:-1], self.bounds[1:])]
        return list(zip(tf.split(table, sizes), tf.split(self.bias, sizes)))

    def _head(self, weight, bias):
        """The head's weight rows and biases: the first cutoffs[0] words, then the clusters."""
        if self.n_clusters:
            weight = tf.concat([weight, tf.cast(self.cluster_w, weight.dtype)], axis=0)
            bias = tf.concat([bias, self.cluster_b], axis=0)
        return weight, bias

    def log_prob(self, h, table):
        """(N, vocab) log-probabilities of every word (for tests and generation)."""
        (w0, b0), *tails = self._clusters(table)
        head = self._log_softmax(h, *self._head(w0, b0))  # (N, c0 + clusters)
        c0 = self.bounds[1]
        parts = [head[:, :c0]]
        for k, (w, b) in enumerate(tails):
            parts.append(head[:, c0 + k:c0 + k + 1] + self._log_softmax(h, w, b))
        return tf.concat(parts, axis=-1)

    def call(self, h, table, targets, inline=False):
        """Negative log-likelihood (N,) of ``targets`` (N,) int, computing each tail cluster's
        softmax only for the tokens that fall in it, up to the next of ``tail_buckets``
        (``_tail_nll``). ``inline``: the cross-entropies traced into the caller's graph, not
        nested as XLA-compiled functions (a graph converted to ONNX: tf2onnx converts no
        function call)."""
        # h's gradient in float32; int64 ids, whose GPU kernels read device memory (int32's
        # comparisons, pads and scatters are host kernels: common/tools/gpu_placement.py)
        h, targets = tf.cast(h, tf.float32), tf.cast(targets, tf.int64)
        (w0, b0), *tails = self._clusters(table)
        c0 = self.bounds[1]
        head_index = targets
        for k in range(self.n_clusters):  # tail words are scored by their cluster in the head
            in_k = (targets >= self.bounds[k + 1]) & (targets < self.bounds[k + 2])
            head_index = tf.where(in_k, tf.constant(c0 + k, tf.int64), head_index)
        # A static row count (a training or evaluation step) allows the static form; an
        # exported signature's does not, and is not compiled by XLA.
        static = self.static_shapes and targets.shape[0] is not None
        nll = sparse_xent(*self._scores(h, *self._head(w0, b0)), head_index,
                          nested=not (static or inline))
        for k, (w, b) in enumerate(tails):
            lo, hi = self.bounds[k + 1], self.bounds[k + 2]
            nll += (self._tail_nll_static(h, targets, w, b, lo, hi, tail_buckets(
                targets.shape[0])) if static else
                self._tail_nll(h, targets, w, b, lo, hi, nested=not inline))
        return nll

    def _tail_nll(self, h, targets, weight, bias, lo, hi, nested=True):
        """(N,) the within-cluster NLL of the tokens whose target is in [lo, hi), 0 elsewhere,
        computed for the cluster's tokens only, gathered and padded with zero rows up to the
        bucket that holds them (``bucket_rows``: a shape known only when the step runs)."""
        idx = tf.where((targets >= lo) & (targets < hi))  # (n, 1) int64
        n = tf.shape(idx)[0]
        pad = bucket_rows(n, tf.shape(targets)[0]) - n
        rows = tf.concat([idx[:, 0], tf.zeros([pad], tf.int64)], 0)  # padded with row 0's
        real = tf.range(tf.cast(n + pad, tf.int64)) < tf.cast(n, tf.int64)
        labels = (tf.gather(targets, rows) - lo) * tf.cast(real, tf.int64)
        tail = sparse_xent(*self._scores(tf.gather(h, rows), weight, bias), labels,
                           nested=nested)
        return tf.scatter_nd(idx, tail[:n], tf.shape(targets, out_type=tf.int64))

    def _tail_nll_static(self, h, targets, weight, bias, lo, hi, buckets):
        """``_tail_nll`` with every shape static, so that XLA compiles it (``--xla``):
        ``tf.switch_case`` picks the smallest of ``buckets`` that holds the cluster's tokens,
        and that branch scores that many rows, fixed in its graph (the first rows by position
        whose target is in the cluster, then rows that are not, whose results are dropped).
        XLA compiles every branch; outside XLA, TensorFlow cannot take the gradient of
        ``sparse_xent``'s custom gradient inside a branch, hence the two forms.

        Compiled once per run: the branches hold no nested compiled function (XLA, resolving
        which of the case's inputs are constants, failed on them with a ``RET_CHECK`` line at
        every compile) and return a dense gradient (``_take_rows``)."""
        in_cluster = tf.cast((targets >= lo) & (targets < hi), tf.int64)  # (N,) 0 or 1
        count = tf.reduce_sum(in_cluster)
        index = tf.searchsorted(tf.constant(buckets, tf.int64), count[None])[0]
        n = targets.shape[0]

        def rows(r):
            def nll():
                # top_k keeps the lower index first among equal keys: the cluster's tokens in
                # order, then the others
                pick = tf.math.top_k(in_cluster, k=r).indices  # (r,)
                real = tf.gather(in_cluster, pick)  # (r,) 1: in the cluster, 0: a filler row
                labels = (tf.gather(targets, pick) - lo) * real
                tail = sparse_xent(*self._scores(_take_rows(h, pick), weight, bias), labels,
                                   nested=False)
                return tf.scatter_nd(pick[:, None], tail * tf.cast(real, tail.dtype), [n])
            return nll
        return tf.switch_case(index, [rows(r) for r in buckets])


@tf.custom_gradient
def _take_rows(h, pick):
    """``tf.gather(h, pick)`` whose gradient is a dense (N, D) tensor: ``tf.gather``'s is
    sparse, and a branch of a case cannot return it as it is; TensorFlow splits it into values,
    indices and a dense shape, whose use outside the case makes XLA take every input of the
    case as a compile-time constant, compiling the step again for every batch."""
    def grad(dy):
        return tf.scatter_nd(pick[:, None], dy, h.shape), None
    return tf.gather(h, pick), grad


def sparse_xent(scores, bias, labels, nested: bool = True):
    """Cross-entropy (N,) of the float32 logits ``scores + bias`` ((N, V) in any float dtype,
    (V,) float32) at ``labels`` (N,), as ``tf.nn.sparse_softmax_cross_entropy_with_logits``.

    Two XLA computations: the forward keeps only each row's log-sum-exp, and the backward
    recomputes the logits from ``scores`` instead of reading stored float32 ones; each is one
    or two fused passes over the (N, V) scores, where TensorFlow's fused CPU kernel (with the
    cast and the bias addition around it) makes several (the measurement: docs/performance/
    transformerxl.md). XLA compiles once per shape. ``nested=False`` inside a function that
    XLA compiles whole (``--xla``): the two are traced into it instead of nested in it."""
    forward, backward = ((_xent_forward, _xent_backward) if nested else
                         (_xent_forward.python_function, _xent_backward.python_function))

    @tf.custom_gradient
    def xent(scores, bias):
        nll, lse = forward(scores, bias, labels)
        return nll, lambda dnll: backward(scores, bias, labels, lse, dnll)
    return xent(scores, bias)


@graph.function(jit_compile=True)
def _xent_forward(scores, bias, labels):
    logits = tf.cast(scores, tf.float32) + bias
    peak = tf.reduce_max(logits, axis=-1, keepdims=True)
    lse = tf.math.log(tf.reduce_sum(tf.exp(logits - peak), axis=-1, keepdims=True)) + peak
    return lse[:, 0] - tf.gather(logits, labels, batch_dims=1), lse


@graph.function(jit_compile=True)
def _xent_backward(scores, bias, labels, lse, dnll):
    logits = tf.cast(scores, tf.float32) + bias
    dlogits = (tf.exp(logits - lse) - tf.one_hot(labels, tf.shape(logits)[-1])) * dnll[:, None]
    return tf.cast(dlogits, scores.dtype), tf.reduce_sum(dlogits, axis=0)
