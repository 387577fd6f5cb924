"""How a token stream is cut into rows: ``rows`` contiguous streams of equal length, the tail
that does not divide dropped (``tfdata_pipeline``'s docstring says how training and evaluation
read them). No TensorFlow: the DALI graph and ``benchtools/dali_compare.py`` read it too."""
from __future__ import annotations

import numpy as np

from common.errors import DataError


def layout(total: int, rows: int, tgt_len: int) -> tuple[int, int]:
    """(stream length, steps per epoch) of ``total`` tokens cut into ``rows`` streams."""
    length = total // rows
    if length < 2:
        raise DataError(f"{total:,} tokens cannot make {rows} streams of 2 tokens or more: "
                        "lower --batch_size or --batch_chunk, or use more text")
    steps = (length - 1) // tgt_len
    if steps < 1:
        raise DataError(f"streams of {length} tokens are shorter than one segment of "
                        f"--tgt_len {tgt_len} plus one")
    return length, steps


def streams(tokens: np.ndarray, rows: int) -> np.ndarray:
    """(rows, L) contiguous streams of the token stream."""
    length = layout(len(tokens), rows, 1)[0]
    return np.asarray(tokens[:rows * length], np.int32).reshape(rows, length)


def steps_per_epoch(tokens: int, rows: int, tgt_len: int) -> int:
    return max(0, (tokens // rows - 1) // tgt_len)
