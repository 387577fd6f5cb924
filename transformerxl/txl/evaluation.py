"""Evaluation as NVIDIA's Transformer-XL does it (``run_wt103_base.sh eval``).

The split is cut into ``batch_size`` (16) contiguous streams (the remainder is dropped) and
read in segments of ``tgt_len`` (64) tokens, the last one shorter; the memory (640) carries from
one segment to the next. Perplexity is exp(mean over segments of each segment's mean loss), so
the short last segment weighs as much as the others, as in NVIDIA's scripts; the exactly
token-weighted figure is reported beside it.
"""
from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from txl.tfdata_pipeline import streams


def segments(tokens: np.ndarray, batch_size: int = 16, tgt_len: int = 64
             ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(inputs, targets) int32 (batch_size, <= tgt_len) segments, in order."""
    data = streams(tokens, batch_size)
    n = data.shape[1]
    for i in range(0, n - 1, tgt_len):
        j = min(i + tgt_len, n - 1)
        yield data[:, i:j], data[:, i + 1:j + 1]


def perplexities(segment_losses, segment_tokens) -> dict:
    """NVIDIA's perplexity (segments weighted equally) and the token-weighted one."""
    losses = np.asarray(segment_losses, np.float64)
    tokens = np.asarray(segment_tokens, np.float64)
    return {"ppl": math.exp(losses.mean()),
            "ppl_token_weighted": math.exp((losses * tokens).sum() / tokens.sum()),
            "tokens": int(tokens.sum())}
