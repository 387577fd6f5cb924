"""A dataset in COCO's layout -> sharded TFRecords, DALI index files and the label map.

Input (COCO 2017's layout; any number of categories, any category ids)::

    <root>/train2017/  <root>/val2017/  <root>/annotations/instances_{train,val}2017.json

Output in ``out_dir``: ``train-NNNNN-of-MMMMM`` and ``validation-NNNNN-of-MMMMM`` TFRecords with
``image/encoded`` (JPEG, every image decoded in full first), ``image/height``, ``image/width``
(original pixels), ``image/id`` (the COCO image id), ``image/object/bbox/{ymin,xmin,ymax,xmax}``
(normalised) and ``image/object/class/label`` (category ids) for the non-crowd boxes; ``idx/``;
``label_map.json`` (categories and ``num_classes`` = the largest id, so that class column k is
category k as in NVIDIA's 90-class COCO setup); and ``validation_annotations.json``, a copy of
the val annotations that evaluation scores against (crowd regions included, as COCO does).
"""
from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Iterable

from common import prepare_cli, tfrecord_writer
from common.errors import DataError
from common.images import jpeg_bytes

SPLITS = (("train", "train2017"), ("validation", "val2017"))


def load(root: str, coco_split: str):
    """(images, {image id: [annotations]}, categories) of one split, checked."""
    path = os.path.join(root, "annotations", f"instances_{coco_split}.json")
    if not os.path.isfile(path):
        raise DataError(f"{path} does not exist (expected COCO's layout under {root})")
    try:
        with open(path) as f:
            coco = json.load(f)
        images, anns, cats = coco["images"], coco.get("annotations", []), coco["categories"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise DataError(f"{path} is not COCO instances JSON ({type(e).__name__}: {e})") from None
    cat_ids = {c["id"] for c in cats}
    if not cat_ids or not all(isinstance(i, int) and i > 0 for i in cat_ids):
        raise DataError(f"{path}: category ids must be positive integers")
    by_image = {im["id"]: [] for im in images}
    sizes = {im["id"]: (im["height"], im["width"]) for im in images}
    for a in anns:
        where = f"{path}: annotation {a.get('id')}"
        if a.get("image_id") not in by_image:
            raise DataError(f"{where} refers to image {a.get('image_id')}, which is not listed")
        if a.get("category_id") not in cat_ids:
            raise DataError(f"{where} has category {a.get('category_id')}, which is not listed")
        box = a.get("bbox")
        if (not isinstance(box, list) or len(box) != 4
                or not all(isinstance(v, (int, float)) and math.isfinite(v) for v in box)):
            raise DataError(f"{where} has bbox {box!r}; expected [x, y, width, height]")
        x, y, w, h = box
        H, W = sizes[a["image_id"]]
        if w <= 0 or h <= 0 or x < -1 or y < -1 or x + w > W + 1 or y + h > H + 1:
            raise DataError(f"{where} has bbox {box} outside its {W}x{H} image or empty")
        by_image[a["image_id"]].append(a)
    return images, by_image, cats


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
    boxes = [a["bbox"] for a in anns if not a.get("iscrowd", 0)]
    labels = [a["category_id"] for a in anns if not a.get("iscrowd", 0)]

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
    os.makedirs(out_dir, exist_ok=True)
    counts, categories = {}, None
    for prefix, coco_split in SPLITS:
        images, by_image, cats = load(root, coco_split)
        if categories is None:
            categories = sorted(cats, key=lambda c: c["id"])
        elif sorted(c["id"] for c in cats) != [c["id"] for c in categories]:
            raise DataError(f"{coco_split} lists other categories than train2017")
        image_dir = os.path.join(root, coco_split)
        tfrecord_writer.write_shards(
            images, lambda im, boxes=by_image, d=image_dir: _example(im, boxes[im["id"]], d),
            out_dir, prefix,
            train_shards if prefix == "train" else val_shards, log, unit="images")
        counts[prefix] = len(images)
    shutil.copy(os.path.join(root, "annotations", "instances_val2017.json"),
                os.path.join(out_dir, "validation_annotations.json"))
    with open(os.path.join(out_dir, "label_map.json"), "w") as f:
        json.dump({"num_classes": max(c["id"] for c in categories),
                   "categories": categories}, f, indent=1)
    log(f"wrote {counts['train']} train and {counts['validation']} validation images of "
        f"{len(categories)} categories to {out_dir}")
    return {**counts, "categories": len(categories)}


def main(argv: Iterable[str] | None = None) -> int:
    def arguments(p):
        p.add_argument("coco_root", help="folder with train2017/, val2017/ and annotations/")
        p.add_argument("out_dir", help="where the TFRecords go")
        prepare_cli.add_shards(p, train=64, val=8)
    return prepare_cli.main(__doc__, arguments, lambda a: prepare(
        a.coco_root, a.out_dir, a.train_shards, a.val_shards), argv)
