"""Transformer-XL's evaluation protocol (segments, perplexity) and generation with memory."""
import math

import numpy as np
import pytest
import tensorflow as tf

from txl import tfdata_pipeline
from txl.config import preset_config
from txl.generate import generate
from txl.metrics import PerplexityMetric
from txl.model import TransformerXL

pytestmark = pytest.mark.both_stacks  # the stack check: the NGC suite runs this file


def test_segments_cover_each_stream_in_order_with_a_shorter_last_one():
    tokens = np.arange(16 * 150 + 7, dtype=np.int32)  # 7 tokens of remainder are dropped
    segs = list(tfdata_pipeline.eval_dataset(tokens, 16, 64).as_numpy_iterator())
    assert [x.shape for x, _ in segs] == [(16, 64), (16, 64), (16, 21)]  # 149 = 64 + 64 + 21
    x = np.concatenate([s[0] for s in segs], axis=1)
    y = np.concatenate([s[1] for s in segs], axis=1)
    np.testing.assert_array_equal(x[:, 0], np.arange(16) * 150)
    np.testing.assert_array_equal(y, x + 1)
    # Two ranks hold the streams' two halves; the inference benchmark drops the short segment.
    rank1 = list(tfdata_pipeline.eval_dataset(tokens, 16, 64, rank=1, world=2).as_numpy_iterator())
    np.testing.assert_array_equal(np.concatenate([s[0] for s in rank1], axis=1), x[8:])
    assert len(list(tfdata_pipeline.eval_dataset(tokens, 16, 64, drop_short=True))) == 2


def test_perplexity_weighs_segments_equally_as_nvidia_does():
    nvidia, weighted = PerplexityMetric("ppl", True, 2), PerplexityMetric("ppl_tw", False)
    for m in (nvidia, weighted):  # two segments of 2 rows: mean NLL 2 over 64, 4 over 16 tokens
        m.update_state(tf.fill((2, 64), 2.0))
        m.update_state(tf.fill((2, 16), 4.0))
    assert float(nvidia.result()) == pytest.approx(math.exp(3.0), rel=1e-6)
    assert float(weighted.result()) == pytest.approx(math.exp((2 * 64 + 4 * 16) / 80), rel=1e-6)


def _model(mem_len):
    tf.keras.utils.set_random_seed(0)
    cfg = preset_config("tiny", vocab_size=30, cutoffs=(10,), mem_len=mem_len)
    model = TransformerXL(cfg)
    model(tf.zeros((1, 2), tf.int32), model.initial_mems(1), tf.zeros((1, 2), tf.int32))
    return model


def test_greedy_generation_with_memory_equals_rescoring_the_whole_text():
    model = _model(mem_len=32)  # longer than the text: nothing leaves the memory
    prompt, scores = [3, 7, 1, 4], []
    new = generate(model, prompt, 6, scores=scores)
    text = list(prompt)
    for token, lp in zip(new, scores):  # no memory: the whole text scored again each time
        logp, _ = model.log_prob(tf.constant([text], tf.int32), model.empty_mems(1))
        np.testing.assert_allclose(lp, logp[0, -1].numpy(), rtol=1e-4, atol=1e-5)
        assert token == int(np.argmax(logp[0, -1]))
        text.append(token)


def test_sampling_with_top_k_1_is_greedy_and_sampling_is_seeded():
    model = _model(mem_len=8)
    greedy = generate(model, [1, 2], 5)
    assert generate(model, [1, 2], 5, greedy=False, top_k=1, seed=3) == greedy
    a = generate(model, [1, 2], 8, greedy=False, temperature=2.0, seed=5)
    assert a == generate(model, [1, 2], 8, greedy=False, temperature=2.0, seed=5)
    assert all(0 <= t < 30 for t in a)


def test_a_prompt_longer_than_the_memory_is_read_in_segments_of_mem_len(monkeypatch):
    """Memory bounded by mem_len: no segment longer than it goes through the model, and only
    the last token's next-word probabilities are computed (an 8k-word prompt once took 3.4 GB);
    a prompt within the memory gives what one segment gives."""
    model = _model(mem_len=8)
    seen, real_hidden, real_log_prob = [], model.hidden, model.log_prob
    monkeypatch.setattr(model, "hidden", lambda t, m, **kw: (seen.append(t.shape[1]),
                                                             real_hidden(t, m, **kw))[1])
    monkeypatch.setattr(model, "log_prob", lambda t, m: (seen.append(("lp", t.shape[1])),
                                                         real_log_prob(t, m))[1])
    prompt = [int(t) for t in np.random.default_rng(0).integers(0, 30, 100)]
    reports = []
    new = generate(model, prompt, 3, progress=lambda *a: reports.append(a))
    assert len(new) == 3 and reports[-1][:2] == (3, 3)
    assert max(s for s in seen if isinstance(s, int)) <= 8
    assert all(s == ("lp", 1) for s in seen if not isinstance(s, int))
    short = prompt[:9]  # 8 in the memory, the last read with it: one segment's context
    one_segment, _ = real_log_prob(tf.constant([short], tf.int32), model.empty_mems(1))
    first = []
    generate(model, short, 1, scores=first)
    np.testing.assert_allclose(first[0], one_segment[0, -1].numpy(), rtol=1e-4, atol=1e-5)
