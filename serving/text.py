"""A text as Transformer-XL's token ids, and what a sequence answers for it: the one piece of
code behind ``serving.text_client`` (a sequence of the server, the memory kept there) and the
Python API's ``score``/``generate`` (``common.api.Sequence``, the memory kept in the process),
so that the two answer alike. A sequence is anything with ``send(tokens, targets=None,
end=False)`` answering one segment's ``nll`` (with targets) or next word's ``log_probs``.

The standard library and numpy only: the clients run where tritonclient is and TensorFlow
is not. A text or prompt the model cannot take is a ``CommandError`` line.
"""
from __future__ import annotations

import math
import random
from collections.abc import Callable

import numpy as np

from serving.connection import CommandError

EOS, UNK = "<eos>", "<unk>"


def encode(text: str, vocab: list[str], lines: bool) -> list[int]:
    """Token ids of ``text`` as the corpus was prepared: with ``lines``, each line's words then
    ``<eos>``; a word the vocabulary lacks is ``<unk>`` (refused where it has none)."""
    index = {w: i for i, w in enumerate(vocab)}
    unk = index.get(UNK)
    ids = []
    for line in text.splitlines() if lines else [text]:
        for word in line.split():
            if word not in index and unk is None:
                raise CommandError(f"'{word}' is not in the vocabulary, which has no {UNK}")
            ids.append(index.get(word, unk))
        if lines:
            ids.append(index[EOS])
    return ids


SEGMENT = 64  # tokens a scoring request, where the model takes as many


def score(seq, ids: list[int], segment: int,
          each: Callable[[int, int, int, int, float], None] | None = None) -> dict:
    """The text's NLL in segments of ``segment`` tokens of one sequence (the first token is
    context only; the last request carries the end flag): ``{"tokens", "nll", "perplexity",
    "perplexity_per_segment", "segments"}``: the mean NLL a token and its exponential (every
    token weighs alike: evaluation's ``ppl_token_weighted``), the exponential of the segments'
    mean NLLs averaged (every segment weighs alike: evaluation's headline perplexity, NVIDIA's),
    and each segment's mean NLL.
    ``each(n, segments, start, end, mean)`` is called after each segment."""
    if len(ids) < 2:
        raise CommandError("the text has fewer than two tokens: nothing to score")
    total, count, means = 0.0, 0, []
    starts = range(0, len(ids) - 1, segment)
    for n, start in enumerate(starts):
        end = min(start + segment, len(ids) - 1)
        nll = seq.send(ids[start:end], ids[start + 1:end + 1], end=n == len(starts) - 1)["nll"]
        total, count = total + float(np.sum(nll)), count + len(nll)
        means.append(float(np.mean(nll)))
        if each:
            each(n, len(starts), start, end, means[-1])
    return {"tokens": count, "nll": total / count, "perplexity": math.exp(total / count),
            "perplexity_per_segment": math.exp(sum(means) / len(means)), "segments": means}


def continue_ids(seq, ids: list[int], words: int, sample: bool, seed: int,
                 longest: int | None = None) -> list[int]:
    """The ``words`` token ids after ``ids``: the prompt in segments of at most ``longest``
    tokens, then one word a request (the last with the end flag), the most probable or, with
    ``sample``, one drawn from the model's probabilities (``seed``)."""
    if not ids:
        raise CommandError("the prompt has no word")
    rng = random.Random(seed)
    tokens = ids
    if longest:
        while len(tokens) > longest:  # the prompt's head goes first, as its own segments
            seq.send(tokens[:longest])
            tokens = tokens[longest:]
    out = []
    for n in range(words):
        logp = seq.send(tokens, end=n == words - 1)["log_probs"]
        if sample:
            p = np.exp(logp - np.max(logp))
            nxt = rng.choices(range(len(p)), weights=p / p.sum())[0]
        else:
            nxt = int(np.argmax(logp))
        out.append(nxt)
        tokens = [nxt]
    return out
