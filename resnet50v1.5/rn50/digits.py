"""A small real image dataset with no download: scikit-learn's 1,797 handwritten digits.

Written as an ImageNet-style folder (``train/<class>/*.JPEG``, ``val/<class>/*.JPEG``) so that it
goes through ``prepare_dataset.py`` exactly as ImageNet does. The 8x8 originals are upscaled
(bicubic) to ``size`` pixels and stored as RGB JPEGs.
"""
from __future__ import annotations

import os

import numpy as np


def export(dst: str, size: int = 32, val_fraction: float = 0.2, limit: int | None = None,
           seed: int = 0) -> dict:
    """Writes the folder; ``limit`` keeps the first N images (of a fixed shuffle) for tests."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    order = np.random.default_rng(seed).permutation(len(digits.target))
    if limit:
        order = order[:limit]
    n_val = int(round(len(order) * val_fraction))
    counts = {"train": 0, "val": 0}
    for rank, i in enumerate(order):
        split = "val" if rank < n_val else "train"
        pixels = (digits.images[i] * (255.0 / 16.0)).astype(np.uint8)  # 0..16 -> 0..255
        image = Image.fromarray(pixels, "L").resize((size, size), Image.BICUBIC).convert("RGB")
        folder = os.path.join(dst, split, f"digit_{digits.target[i]}")
        os.makedirs(folder, exist_ok=True)
        image.save(os.path.join(folder, f"{i:04d}.JPEG"), quality=95)
        counts[split] += 1
    return counts


if __name__ == "__main__":
    import sys

    out = sys.argv[1] if len(sys.argv) > 1 else "digits"
    print(export(out))
