"""The tied adaptive softmax: normalised, equal to a full softmax without cutoffs, and its NLL
equal to the log-probabilities it defines."""

import numpy as np
import tensorflow as tf

from txl.adaptive_softmax import AdaptiveSoftmax


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
