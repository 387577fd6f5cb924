"""Multiscale grid anchors exactly as TF-OD's ``multiscale_grid_anchor_generator`` makes them
for NVIDIA's SSD320 v1.2 (levels 3-7, anchor scale 4, aspect ratios 1, 2, 0.5, two scales per
octave): 6 anchors per location, 12,804 at 320x320.

* Base size ``4 * 2**level``; scales ``2**(i / 2)``; height ``s / sqrt(ar) * base`` and width
  ``s * sqrt(ar) * base`` (so ``ar`` is width / height).
* Per location: aspect-ratio-major, scale-minor. Locations row-major (y, then x).
* Centres at ``offset + i * stride``, where the offset is ``stride / 2`` only when the image size
  is divisible by the stride (at 320, level 7 has offset 0: centres 0, 128, 256).
* Boxes (ymin, xmin, ymax, xmax) normalised by the image size, not clipped.
"""
from __future__ import annotations

import math

import numpy as np

MIN_LEVEL, MAX_LEVEL = 3, 7
ANCHOR_SCALE = 4.0
ASPECT_RATIOS = (1.0, 2.0, 0.5)
SCALES_PER_OCTAVE = 2
ANCHORS_PER_LOCATION = len(ASPECT_RATIOS) * SCALES_PER_OCTAVE


def level_anchors(image_size: int, level: int) -> np.ndarray:
    """(n * n * 6, 4) anchors of one level, in pixels."""
    stride = 2 ** level
    base = ANCHOR_SCALE * stride
    n = math.ceil(image_size / stride)
    offset = stride / 2 if image_size % stride == 0 else 0.0
    hw = np.array([(s / math.sqrt(ar) * base, s * math.sqrt(ar) * base)
                   for ar in ASPECT_RATIOS
                   for s in (2 ** (i / SCALES_PER_OCTAVE) for i in range(SCALES_PER_OCTAVE))])
    centres = offset + stride * np.arange(n, dtype=np.float64)
    cy, cx = np.meshgrid(centres, centres, indexing="ij")  # row-major: y outer, x inner
    c = np.stack([cy.ravel(), cx.ravel()], axis=-1)[:, None, :]  # (n*n, 1, 2)
    half = hw[None, :, :] / 2  # (1, 6, 2)
    return np.concatenate([c - half, c + half], axis=-1).reshape(-1, 4)


def generate(image_size: int = 320) -> np.ndarray:
    """(12,804 at 320, 4) float32 anchors (ymin, xmin, ymax, xmax), normalised, levels 3..7."""
    boxes = [level_anchors(image_size, level) for level in range(MIN_LEVEL, MAX_LEVEL + 1)]
    return (np.concatenate(boxes) / image_size).astype(np.float32)
