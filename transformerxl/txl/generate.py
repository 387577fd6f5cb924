"""Continues a prompt with a Transformer-XL model: greedy, or sampled with a temperature and
top-k. The prompt is read segment by segment, ``mem_len`` tokens at a time, with the memory
carrying what came before (up to ``mem_len`` positions), so that a long prompt costs memory in
proportion to ``mem_len``, not to its length; only its last token's next-word probabilities
are computed. Then each new token is fed alone. The memory starts empty, not as the zeros
NVIDIA's evaluation starts from, so that nothing but the text is attended to."""
from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import tensorflow as tf


def read_prompt(model, prompt: list[int]):
    """(log-probabilities (vocab,) of the word after ``prompt``, the memory after it)."""
    mems = model.empty_mems(1)
    segment = model.cfg.mem_len or len(prompt)  # no memory: one segment, as there is no other
    for start in range(0, len(prompt) - 1, segment):
        chunk = prompt[start:min(start + segment, len(prompt) - 1)]
        _, mems = model.hidden(tf.constant([chunk], tf.int32), mems, training=False)
    logp, mems = model.next_log_prob(tf.constant([prompt[-1:]], tf.int32), mems)
    return logp[0], mems


def generate(model, prompt: list[int], length: int, greedy: bool = True,
             temperature: float = 1.0, top_k: int = 0, seed: int | None = None,
             scores: list | None = None,
             progress: Callable[[int, int, float], None] | None = None) -> list[int]:
    """The ``length`` token ids that follow ``prompt`` (``scores``, if given, receives the
    log-probabilities each token was chosen from). ``progress(done, length, tokens_per_s)`` is
    called about every ten seconds."""
    if not prompt:
        raise ValueError("the prompt needs at least one token")
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    rng = np.random.default_rng(seed)
    logp, mems = read_prompt(model, prompt)
    out, start = [], time.perf_counter()
    last_report = start
    for _ in range(length):
        lp = logp.numpy().astype(np.float64)
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
        logp, mems = model.next_log_prob(tf.constant([[token]], tf.int32), mems)
        logp = logp[0]
        now = time.perf_counter()
        if progress and (now - last_report > 10 or len(out) == length):
            progress(len(out), length, len(out) / (now - start))
            last_report = now
    return out
