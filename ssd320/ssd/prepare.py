"""A dataset in COCO's layout -> sharded TFRecords, DALI index files and the label map.

Input (COCO 2017's layout; any number of categories, any category ids)::

    <root>/train2017/  <root>/val2017/  <root>/annotations/instances_{train,val}2017.json

Output in ``out_dir``: ``train-NNNNN-of-MMMMM`` and ``validation-NNNNN-of-MMMMM`` TFRecords with
``image/encoded`` (JPEG, every image decoded in full first), ``image/height``, ``image/width``
(original pixels), ``image/id`` (the COCO image id), ``image/object/bbox/{ymin,xmin,ymax,xmax}``
(normalised) and ``image/object/class/label`` (category ids) for the non-crowd boxes (at most
``MAX_BOXES``, 100: an image with more keeps its 100 largest, and the run says how many images
that touched; both input pipelines refuse a record with more); ``idx/``;
``label_map.json`` (categories and ``num_classes`` = the largest id, so that class column k is
category k as in NVIDIA's 90-class COCO setup); and ``validation_annotations.json``, a copy of
the val annotations that evaluation scores against (crowd regions included, as COCO does).

Refused with one line naming the file and field: annotations that are not COCO instances JSON
(``ssd/coco_json.py``: binary, truncated, missing or mistyped fields, duplicate ids), a split
with no images, a box outside its image, an image that does not decode or whose size disagrees
with its annotation. The new files replace an earlier preparation in ``out_dir`` only once all
are written (``common.data.prepare_cli.staged``).
"""
from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable

if __name__ == "__main__":  # python -m ssd.prepare: the scripts' start (common/entry.py), from
    import sys  # a wheel too, before this module's imports bring TensorFlow in unfiltered

    from common import entry
    sys.exit(entry.main_of("ssd.prepare:main")("python -m ssd.prepare"))

from common.data import prepare_cli, tfrecord_writer
from common.data.images import jpeg_bytes
from common.errors import DataError
from ssd import coco_json
from ssd.config import MAX_BOXES

SPLITS = (("train", "train2017"), ("validation", "val2017"))


def _annotations(root: str, coco_split: str) -> str:
    return os.path.join(root, "annotations", f"instances_{coco_split}.json")


def load(root: str, coco_split: str):
    """(images, {image id: [annotations]}, categories) of one split, checked: the structure
    (``coco_json.instances``), at least one image, boxes inside their image."""
    path = _annotations(root, coco_split)
    if not os.path.isfile(path):
        raise DataError(f"{path} does not exist (expected COCO's layout under {root})")
    images, anns, cats = coco_json.instances(path)
    if not images:
        raise DataError(f"{path} lists no images: the {coco_split} split would be empty")
    if not cats:
        raise DataError(f"{path} lists no categories")
    by_image = {im["id"]: [] for im in images}
    sizes = {im["id"]: (im["height"], im["width"]) for im in images}
    for i, a in enumerate(anns):
        x, y, w, h = a["bbox"]
        H, W = sizes[a["image_id"]]
        if w <= 0 or h <= 0 or x < -1 or y < -1 or x + w > W + 1 or y + h > H + 1:
            raise DataError(f"{path}: annotations[{i}] (id {a['id']}) has bbox {a['bbox']} "
                            f"outside its {W}x{H} image or empty")
        by_image[a["image_id"]].append(a)
    return images, by_image, cats


def kept_boxes(anns: list) -> list:
    """The non-crowd annotations a record keeps: all, or the MAX_BOXES largest by area when an
    image has more (the model's targets hold MAX_BOXES; ``prepare`` says how many images)."""
    boxes = [a for a in anns if not a.get("iscrowd", 0)]
    if len(boxes) > MAX_BOXES:
        boxes = sorted(boxes, key=lambda a: -a["bbox"][2] * a["bbox"][3])[:MAX_BOXES]
    return boxes


def _example(image: dict, anns: list, image_dir: str) -> bytes:
    import tensorflow as tf
    from PIL import Image

    path = os.path.join(image_dir, image["file_name"])
    if not os.path.isfile(path):
        raise DataError(f"{path} (image {image['id']}) does not exist")
    encoded = jpeg_bytes(path)
    with Image.open(path) as im:
        if (im.height, im.width) != (image["height"], image["width"]):
            raise DataError(f"{path} is {im.width}x{im.height} but its annotations say "
                            f"{image['width']}x{image['height']}")
    H, W = image["height"], image["width"]
    kept = kept_boxes(anns)
    boxes, labels = [a["bbox"] for a in kept], [a["category_id"] for a in kept]

    def floats(v):
        return tf.train.Feature(float_list=tf.train.FloatList(value=v))

    def ints(v):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=v))
    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/height": ints([H]), "image/width": ints([W]), "image/id": ints([image["id"]]),
        "image/object/bbox/ymin": floats([max(b[1], 0) / H for b in boxes]),
        "image/object/bbox/xmin": floats([max(b[0], 0) / W for b in boxes]),
        "image/object/bbox/ymax": floats([min(b[1] + b[3], H) / H for b in boxes]),
        "image/object/bbox/xmax": floats([min(b[0] + b[2], W) / W for b in boxes]),
        "image/object/class/label": ints(labels),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def prepare(root: str, out_dir: str, train_shards: int = 64, val_shards: int = 8,
            log=print) -> dict:
    splits = {prefix: load(root, coco_split) for prefix, coco_split in SPLITS}
    categories = sorted(splits["train"][2], key=lambda c: c["id"])
    if sorted(c["id"] for c in splits["validation"][2]) != [c["id"] for c in categories]:
        raise DataError(f"{_annotations(root, 'val2017')} lists other categories than "
                        f"{_annotations(root, 'train2017')}")
    counts = {}
    for prefix, (_, by_image, _) in splits.items():
        crowded = sum(len(kept_boxes(a)) < sum(not x.get("iscrowd", 0) for x in a)
                      for a in by_image.values())
        if crowded:
            log(f"{prefix}: {crowded} image(s) have more than {MAX_BOXES} boxes; their "
                f"{MAX_BOXES} largest are kept")
    with prepare_cli.staged(out_dir, log) as stage:
        for prefix, coco_split in SPLITS:
            images, by_image, _ = splits[prefix]
            image_dir = os.path.join(root, coco_split)
            tfrecord_writer.write_shards(
                images, lambda im, boxes=by_image, d=image_dir: _example(im, boxes[im["id"]], d),
                stage, prefix, train_shards if prefix == "train" else val_shards, log,
                unit="images")
            counts[prefix] = len(images)
        shutil.copy(_annotations(root, "val2017"),
                    os.path.join(stage, "validation_annotations.json"))
        with open(os.path.join(stage, "label_map.json"), "w") as f:
            json.dump({"num_classes": max(c["id"] for c in categories),
                       "categories": categories}, f, indent=1)
    log(f"wrote {counts['train']} train and {counts['validation']} validation images of "
        f"{len(categories)} categories to {out_dir}")
    largest = max(c["id"] for c in categories)
    if largest > max(2 * len(categories), 100):  # COCO's 80 categories reach id 90
        log(f"note: category ids reach {largest} for {len(categories)} categories: the model "
            f"gets {largest + 1} class columns, most of them never trained; renumber the "
            "categories (and their annotations) 1..N for a head of N + 1")
    return {**counts, "categories": len(categories)}


def main(argv: Iterable[str] | None = None) -> int:
    def arguments(p):
        p.add_argument("coco_root", help="folder with train2017/, val2017/ and annotations/")
        p.add_argument("out_dir", help="where the TFRecords go")
        prepare_cli.add_shards(p, train=64, val=8)
    return prepare_cli.main(__doc__, arguments, lambda a: prepare(
        a.coco_root, a.out_dir, a.train_shards, a.val_shards), argv)
