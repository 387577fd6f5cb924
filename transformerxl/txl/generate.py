"""Continues a prompt with a Transformer-XL model: greedy, or sampled with a temperature and
top-k. The prompt is read in one segment; then each new token is fed alone, with the memory
carrying everything before it (up to ``mem_len`` positions). The memory starts empty, not as
the zeros NVIDIA's evaluation starts from, so that nothing but the text is attended to."""
from __future__ import annotations

import numpy as np
import tensorflow as tf


def generate(model, prompt: list[int], length: int, greedy: bool = True,
             temperature: float = 1.0, top_k: int = 0, seed: int | None = None,
             scores: list | None = None) -> list[int]:
    """The ``length`` token ids that follow ``prompt`` (``scores``, if given, receives the
    log-probabilities each token was chosen from)."""
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    rng = np.random.default_rng(seed)
    mems = model.empty_mems(1)
    logp, mems = model.log_prob(tf.constant([prompt], tf.int32), mems)
    out = []
    for _ in range(length):
        lp = logp[0, -1].numpy().astype(np.float64)
        if scores is not None:
            scores.append(lp)
        if greedy:
            token = int(np.argmax(lp))
        else:
            z = lp / temperature
            if top_k > 0:
                cut = np.partition(z, -top_k)[-top_k]
                z = np.where(z >= cut, z, -np.inf)
            p = np.exp(z - z.max())
            token = int(rng.choice(len(p), p=p / p.sum()))
        out.append(token)
        logp, mems = model.log_prob(tf.constant([[token]], tf.int32), mems)
    return out
