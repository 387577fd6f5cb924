"""A small real image dataset with no download: scikit-learn's 1,797 handwritten digits.

Written as an ImageNet-style folder (``train/<class>/*.JPEG``, ``val/<class>/*.JPEG``) so that it
goes through ``prepare_dataset.py`` exactly as ImageNet does. The 8x8 originals are upscaled
(bicubic) to ``size`` pixels and stored as RGB JPEGs. ``prepare`` makes the records the demo,
the learning check, the INT8 table and the tests train on::

    python resnet50v1.5/rn50/digits.py DIR    # DIR/folder, then DIR/records
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


def prepare(root: str, size: int = 32, limit: int | None = None, train_shards: int = 4,
            val_shards: int = 2, records: str | None = None, log=lambda *_: None) -> str:
    """The digits as prepared records: ``export``'s folder in ``root/folder``, then
    prepare_dataset.py's TFRecords and DALI indexes in ``records`` (default ``root/records``;
    returned), made once for these arguments (``common.data.prepare_cli.generated``)."""
    from common.data.prepare_cli import generated
    from rn50.prepare import prepare as write_records
    return generated(root, "folder", records, {"size": size, "limit": limit,
                                                "shards": [train_shards, val_shards]},
                     lambda src: export(src, size=size, limit=limit),
                     lambda src, out: write_records(src, out, train_shards, val_shards, log=log))


if __name__ == "__main__":
    import argparse
    import runpy

    # In a checkout, its own code first, installed or not (the entry every script starts
    # from); from a wheel (``python -m rn50.digits``) there is no checkout's entry.py beside it.
    ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                         "common", "entry.py")
    if os.path.isfile(ENTRY):
        runpy.run_path(ENTRY)["own_checkout_first"]()

    p = argparse.ArgumentParser(description="Writes the digits as an ImageNet-style folder "
                                "(DIR/folder) and prepares its records (DIR/records).")
    p.add_argument("root")
    p.add_argument("--records", help="the records' folder (default: ROOT/records)")
    p.add_argument("--train_shards", type=int, default=4)
    p.add_argument("--val_shards", type=int, default=2)
    a = p.parse_args()
    print(prepare(a.root, train_shards=a.train_shards, val_shards=a.val_shards,
                  records=a.records, log=print))
