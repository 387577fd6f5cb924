"""The tied adaptive softmax: normalised, equal to a full softmax without cutoffs, and its NLL
equal to the log-probabilities it defines."""

import numpy as np
import pytest
import tensorflow as tf

from txl.adaptive_softmax import AdaptiveSoftmax, sparse_xent

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def _layer(vocab, cutoffs, d, seed=0):
    rng = np.random.default_rng(seed)
    layer = AdaptiveSoftmax(vocab, cutoffs)
    h = rng.normal(size=(7, d)).astype(np.float32)
    table = rng.normal(size=(vocab, d)).astype(np.float32)
    layer.build(h.shape)
    for w in layer.weights:  # non-zero biases and cluster weights, so they are exercised
        w.assign(rng.normal(size=w.shape).astype(np.float32))
    return layer, h, table


def test_log_probabilities_sum_to_one_over_the_vocabulary():
    layer, h, table = _layer(50, (10, 20, 35), 8)
    logp = layer.log_prob(h, table).numpy()
    assert logp.shape == (7, 50)
    np.testing.assert_allclose(np.exp(logp).sum(-1), 1.0, rtol=1e-5)


def test_without_cutoffs_it_is_a_full_softmax():
    layer, h, table = _layer(30, (), 6)
    full = tf.nn.log_softmax(h @ table.T + layer.bias.numpy()).numpy()
    np.testing.assert_allclose(layer.log_prob(h, table).numpy(), full, rtol=1e-5, atol=1e-6)


def test_nll_equals_the_log_probability_of_each_target():
    layer, h, table = _layer(50, (10, 20, 35), 8)
    targets = np.array([0, 9, 10, 19, 20, 34, 49])  # both ends of every cluster
    nll = layer(h, table, targets).numpy()
    logp = layer.log_prob(h, table).numpy()
    np.testing.assert_allclose(nll, -logp[np.arange(7), targets], rtol=1e-5, atol=1e-5)


def test_parameters_beside_the_embedding_at_wikitext103_size():
    layer = AdaptiveSoftmax(267_735, (19_997, 39_997, 199_997))
    layer.build((None, 512))
    assert sum(int(np.prod(w.shape)) for w in layer.weights) == 267_735 + 3 * 512 + 3


def test_padding_to_multiples_of_8_leaves_the_loss_unchanged():
    """AMP pads every softmax (here 11, 10, 15 and 13 outputs) to a multiple of 8 rows; the
    padded rows take no probability and no variable changes shape."""
    layer, h, table = _layer(50, (10, 20, 35), 8)
    padded = AdaptiveSoftmax(50, (10, 20, 35), pad_multiple=8)
    padded.build(h.shape)
    for a, b in zip(padded.weights, layer.weights):
        assert a.shape == b.shape
        a.assign(b)
    targets = np.arange(0, 50, 3, dtype=np.int32)[:7]
    np.testing.assert_allclose(padded(h, table, targets).numpy(),
                               layer(h, table, targets).numpy(), rtol=1e-6)
    np.testing.assert_allclose(padded.log_prob(h, table).numpy(),
                               layer.log_prob(h, table).numpy(), rtol=1e-6, atol=1e-6)


def _gradients(layer, h, table, targets, nll: bool):
    """Gradients of the weighted NLL of ``targets``, from ``layer``'s call or its log_prob."""
    h, table, weight = tf.constant(h), tf.constant(table), np.arange(1.0, 1.0 + len(targets))
    targets = np.asarray(targets, np.int32)
    with tf.GradientTape() as tape:
        tape.watch([h, table])
        if nll:
            value = tf.reduce_sum(layer(h, table, targets) * weight)
        else:
            logp = tf.gather(layer.log_prob(h, table), targets, batch_dims=1)
            value = -tf.reduce_sum(logp * weight)
    return tape.gradient(value, [h, table, *layer.trainable_weights])


@pytest.mark.parametrize("pad,targets", [(1, [0, 9, 10, 19, 20, 34, 49]),
                                         (8, [0, 9, 10, 19, 20, 34, 49]),
                                         (1, [0, 1, 2, 3, 4, 5, 9])],
                         ids=["every-cluster", "padded-to-8", "tails-empty"])
def test_gradients_of_the_nll_equal_those_of_the_log_probabilities(pad, targets):
    """The NLL's custom-gradient cross-entropies (sparse_xent, tail rows padded) against the
    plain log-softmax path of log_prob, for the input, the tied table and every softmax
    variable."""
    layer, h, table = _layer(50, (10, 20, 35), 8)
    if pad > 1:
        padded = AdaptiveSoftmax(50, (10, 20, 35), pad_multiple=pad)
        padded.build(h.shape)
        for a, b in zip(padded.weights, layer.weights):
            a.assign(b)
        layer = padded
    for got, want in zip(_gradients(layer, h, table, targets, nll=True),
                         _gradients(layer, h, table, targets, nll=False)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def test_sparse_xent_equals_tensorflows_in_value_and_gradients():
    rng = np.random.default_rng(1)
    scores = tf.constant(rng.normal(size=(64, 37)).astype(np.float32) * 3)
    bias = tf.constant(rng.normal(size=37).astype(np.float32))
    labels = tf.constant(rng.integers(0, 37, 64).astype(np.int32))
    weight = tf.constant(rng.uniform(0.5, 2, 64).astype(np.float32))
    for dtype, tol in ((tf.float32, 1e-6), (tf.bfloat16, 1e-2)):
        s = tf.cast(scores, dtype)
        out = []
        for fn in (lambda s, b: sparse_xent(s, b, labels),
                   lambda s, b: tf.nn.sparse_softmax_cross_entropy_with_logits(
                       labels=labels, logits=tf.cast(s, tf.float32) + b)):
            with tf.GradientTape() as tape:
                tape.watch([s, bias])
                nll = fn(s, bias)
                value = tf.reduce_sum(nll * weight)
            out.append((nll, *tape.gradient(value, [s, bias])))
        (nll, ds, db), (want_nll, want_ds, want_db) = out
        assert ds.dtype == dtype
        np.testing.assert_allclose(nll.numpy(), want_nll.numpy(), rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(tf.cast(ds, tf.float32).numpy(),
                                   tf.cast(want_ds, tf.float32).numpy(), rtol=tol, atol=tol)
        np.testing.assert_allclose(db.numpy(), want_db.numpy(), rtol=1e-5, atol=1e-5)


def test_tail_buckets_grow_by_at_most_half_and_end_at_the_row_count():
    from txl.adaptive_softmax import tail_buckets
    b = tail_buckets(6144)
    assert b[0] == 64 and b[-1] == 6144 and len(b) <= 14
    assert all(1 < y / x <= 1.5 for x, y in zip(b, b[1:]))
    assert tail_buckets(40) == [40]


@pytest.mark.one_stack("pip", "XLA on TensorFlow 2.17 is test_xla's Transformer-XL case, which "
                        "compiles this softmax in the model's step")
def test_static_shapes_give_the_same_nll_and_gradients_and_compile_with_xla():
    """--xla's form of the tail (a switch over fixed row counts) equals the gathered form, on
    300 tokens (buckets 64, 96, ..., 300) whose clusters take different buckets."""
    rng = np.random.default_rng(3)
    vocab, d, n = 60, 8, 300
    table = tf.constant(rng.normal(size=(vocab, d)).astype(np.float32))
    h = tf.constant(rng.normal(size=(n, d)).astype(np.float32))
    # cluster sizes 170, 70 and 12 tokens: buckets 192, 96 and 64
    targets = tf.constant(rng.permutation(np.concatenate(
        [rng.integers(0, 10, 48), rng.integers(10, 20, 170), rng.integers(20, 35, 70),
         rng.integers(35, 60, 12)])).astype(np.int32))
    results = []
    for static in (False, True):
        layer = AdaptiveSoftmax(vocab, (10, 20, 35), static_shapes=static)
        layer.build(h.shape)
        for w in layer.weights:
            w.assign(np.random.default_rng(1).normal(size=w.shape).astype(np.float32))

        @tf.function(jit_compile=static)
        def loss_and_grads(h, table, layer=layer):
            with tf.GradientTape() as tape:
                tape.watch([h, table])
                nll = layer(h, table, targets)
                loss = tf.reduce_sum(nll * tf.linspace(0.5, 1.5, n))
            return nll, tape.gradient(loss, [h, table, *layer.weights])
        results.append(loss_and_grads(h, table))
    (nll_a, grads_a), (nll_b, grads_b) = results
    np.testing.assert_allclose(nll_b.numpy(), nll_a.numpy(), rtol=1e-5, atol=1e-5)
    for a, b in zip(grads_a, grads_b):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-4, atol=1e-5)


def test_bucket_rows_is_the_smallest_static_bucket_that_holds_the_tokens():
    from txl.adaptive_softmax import bucket_rows, tail_buckets
    for rows in (40, 64, 300, 6144):
        buckets = tail_buckets(rows)
        for n in range(0, rows + 1, 7):
            want = min(b for b in buckets if b >= n)
            assert int(bucket_rows(tf.constant(n), tf.constant(rows))) == want, (rows, n)


def test_the_static_tail_is_one_xla_program_for_every_batch(capfd):
    """--xla compiles Transformer-XL's step once: the branches of the tail's case return a
    dense gradient and nest no compiled function. With tf.gather's sparse gradient leaving the
    case, XLA took the step's inputs as compile-time constants (a program per batch, seen as
    5.5 tokens/s against 1,982 without XLA) and printed a RET_CHECK failure at each compile."""
    rng = np.random.default_rng(4)
    vocab, d, n = 30, 8, 100  # the tail's buckets: 64, 96 and 100 rows
    layer = AdaptiveSoftmax(vocab, (10,), static_shapes=True)
    layer.build((n, d))
    table = tf.Variable(rng.normal(size=(vocab, d)).astype(np.float32))
    h = tf.constant(rng.normal(size=(n, d)).astype(np.float32))

    @tf.function(jit_compile=True, autograph=False)
    def loss_and_grads(h, targets):
        with tf.GradientTape() as tape:
            tape.watch(h)
            x = h + tf.gather(table, targets)  # computed inputs, as the model's are
            loss = tf.reduce_sum(layer(x, table, tf.reshape(targets, [-1])))
        return loss, tape.gradient(loss, [h, table, *layer.weights])

    programs = set()
    for tail in (30, 80, 100):  # tokens in the tail cluster: each batch takes another bucket
        ids = np.r_[rng.integers(0, 10, n - tail), rng.integers(10, vocab, tail)]
        targets = tf.constant(rng.permutation(ids).astype(np.int32))
        programs.add(loss_and_grads.experimental_get_compiler_ir(h, targets)(stage="hlo"))
    assert len(programs) == 1  # the batch is a parameter of the program, not a constant in it
    assert "RET_CHECK" not in capfd.readouterr().err
