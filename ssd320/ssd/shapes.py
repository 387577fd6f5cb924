"""A generated detection dataset in COCO's layout, for demos and learning tests.

No package ships real images with boxes (see the README), so this draws them: 1 to 4 objects of
four classes (rectangle, ellipse, triangle, cross) of varied size, position, colour and aspect
on varied backgrounds (flat colours, gradients, noise, stripes), in images of varied size.
Category ids are 1, 2, 4, 7 (not contiguous, as COCO's are not). ``export`` writes::

    <root>/train2017/*.jpg  <root>/val2017/*.jpg
    <root>/annotations/instances_train2017.json  <root>/annotations/instances_val2017.json

and ``prepare`` the records the demo, the learning check, the INT8 table and the tests train on::

    python ssd320/ssd/shapes.py DIR [--train N --val N --seed S]   # DIR/coco, then DIR/records
"""
from __future__ import annotations

import json
import os

import numpy as np

CATEGORIES = [{"id": 1, "name": "rectangle"}, {"id": 2, "name": "ellipse"},
              {"id": 4, "name": "triangle"}, {"id": 7, "name": "cross"}]


def _background(rng, h, w):
    kind = rng.integers(4)
    base = rng.integers(0, 256, 3)
    if kind == 0:
        img = np.broadcast_to(base, (h, w, 3)).astype(np.float32)
    elif kind == 1:
        other = rng.integers(0, 256, 3)
        t = np.linspace(0, 1, w if rng.integers(2) else h)
        ramp = base + (other - base) * t[:, None]
        img = (np.broadcast_to(ramp[None], (h, w, 3)) if len(t) == w
               else np.broadcast_to(ramp[:, None], (h, w, 3))).astype(np.float32)
    elif kind == 2:
        img = base + rng.normal(0, 40, (h, w, 3))
    else:
        period = int(rng.integers(4, 16))
        stripes = (np.arange(w) // period) % 2
        img = np.where(stripes[None, :, None], base, 255 - base).astype(np.float32)
        img = np.broadcast_to(img, (h, w, 3))
    return np.clip(img, 0, 255).astype(np.uint8)


def _draw(draw, kind, box, colour):
    x0, y0, x1, y1 = box
    if kind == "rectangle":
        draw.rectangle(box, fill=colour)
    elif kind == "ellipse":
        draw.ellipse(box, fill=colour)
    elif kind == "triangle":
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=colour)
    else:
        tw, th = (x1 - x0) / 3, (y1 - y0) / 3
        draw.rectangle((x0 + tw, y0, x1 - tw, y1), fill=colour)
        draw.rectangle((x0, y0 + th, x1, y1 - th), fill=colour)


def make_image(rng, image_id: int, min_side: int = 96, max_side: int = 160):
    """(PIL image, [COCO annotation dicts]) with 1 to 4 objects that overlap little."""
    from PIL import Image, ImageDraw

    h, w = (int(v) for v in rng.integers(min_side, max_side + 1, 2))
    image = Image.fromarray(_background(rng, h, w))
    draw = ImageDraw.Draw(image)
    anns, placed = [], []
    for _ in range(int(rng.integers(1, 5))):
        for _attempt in range(20):
            bw = int(rng.uniform(0.15, 0.6) * w)
            bh = int(np.clip(bw * rng.uniform(0.5, 2.0), 0.15 * h, 0.7 * h))
            x0, y0 = int(rng.integers(0, w - bw + 1)), int(rng.integers(0, h - bh + 1))
            box = np.array([x0, y0, x0 + bw, y0 + bh], np.float64)
            if all(_iou(box, p) < 0.2 for p in placed):
                break
        else:
            continue
        placed.append(box)
        cat = CATEGORIES[int(rng.integers(len(CATEGORIES)))]
        _draw(draw, cat["name"], [x0, y0, x0 + bw - 1, y0 + bh - 1],
              tuple(int(c) for c in rng.integers(0, 256, 3)))
        anns.append({"image_id": image_id, "category_id": cat["id"], "iscrowd": 0,
                     "bbox": [float(x0), float(y0), float(bw), float(bh)],
                     "area": float(bw * bh)})
    return image, anns


def _iou(a, b):
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    inter = ih * iw
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


def export(root: str, train: int = 400, val: int = 100, seed: int = 0, **size) -> dict:
    """Writes ``train`` + ``val`` images and COCO annotations under ``root``."""
    rng = np.random.default_rng(seed)
    os.makedirs(os.path.join(root, "annotations"), exist_ok=True)
    next_id, ann_id = 1, 1
    for split, count in (("train2017", train), ("val2017", val)):
        os.makedirs(os.path.join(root, split), exist_ok=True)
        images, annotations = [], []
        for _ in range(count):
            image, anns = make_image(rng, next_id, **size)
            name = f"{next_id:012d}.jpg"
            image.save(os.path.join(root, split, name), quality=92)
            images.append({"id": next_id, "file_name": name, "height": image.height,
                           "width": image.width})
            for a in anns:
                annotations.append({**a, "id": ann_id})
                ann_id += 1
            next_id += 1
        with open(os.path.join(root, "annotations", f"instances_{split}.json"), "w") as f:
            json.dump({"images": images, "annotations": annotations,
                       "categories": CATEGORIES}, f)
    return {"train": train, "val": val}


def prepare(root: str, train: int = 600, val: int = 100, seed: int = 0, train_shards: int = 4,
            val_shards: int = 1, records: str | None = None, log=lambda *_: None) -> str:
    """The shapes as prepared records: ``export``'s COCO layout in ``root/coco``, then
    prepare_dataset.py's TFRecords and DALI indexes in ``records`` (default ``root/records``;
    returned), made once for these arguments (``common.data.prepare_cli.generated``)."""
    from common.data.prepare_cli import generated
    from ssd.prepare import prepare as write_records
    return generated(root, "coco", records, {"images": [train, val], "seed": seed,
                                              "shards": [train_shards, val_shards]},
                     lambda src: export(src, train, val, seed),
                     lambda src, out: write_records(src, out, train_shards, val_shards, log=log))


if __name__ == "__main__":
    import argparse
    import runpy

    # In a checkout, its own code first, installed or not (the entry every script starts
    # from); from a wheel (``python -m ssd.shapes``) there is no checkout's entry.py beside it.
    ENTRY = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir,
                         "common", "entry.py")
    if os.path.isfile(ENTRY):
        runpy.run_path(ENTRY)["own_checkout_first"]()

    p = argparse.ArgumentParser(description="Writes the generated shapes dataset in COCO's "
                                "layout (DIR/coco) and prepares its records (DIR/records).")
    p.add_argument("root")
    p.add_argument("--train", type=int, default=600)
    p.add_argument("--val", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--records", help="the records' folder (default: ROOT/records)")
    p.add_argument("--train_shards", type=int, default=4)
    p.add_argument("--val_shards", type=int, default=1)
    a = p.parse_args()
    print(prepare(a.root, a.train, a.val, a.seed, a.train_shards, a.val_shards, a.records,
                  log=print))
