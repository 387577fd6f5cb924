"""The COCO-layout JSON files a user hands to SSD320, read and checked with one-line errors.

Used by ``prepare_dataset.py`` (``instances_*.json``), by evaluation
(``validation_annotations.json``) and for ``label_map.json``. Every structural error names the
file and the field (``images[3].height is missing``, ``images[0].width is "640", not an
integer``), instead of a ``KeyError`` or ``TypeError`` from deep inside pycocotools.
"""
from __future__ import annotations

import json
import math
import os

from common.errors import DataError

_IMAGE_FIELDS = {"id": int, "height": int, "width": int, "file_name": str}
_ANNOTATION_FIELDS = {"id": int, "image_id": int, "category_id": int, "bbox": list}
_CATEGORY_FIELDS = {"id": int, "name": str}


def read(path: str, what: str = "a JSON file"):
    """The parsed file; one line when it is missing, not UTF-8 (binary), or not JSON."""
    if not os.path.isfile(path):
        raise DataError(f"{path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except UnicodeDecodeError as e:
        raise DataError(f"{path} is not {what}: byte {e.start} is not UTF-8 (a binary file?)"
                        ) from None
    except json.JSONDecodeError as e:
        truncated = " (truncated?)" if e.pos >= os.path.getsize(path) - 1 else ""
        raise DataError(f"{path} is not {what}: {e.msg} at line {e.lineno} column {e.colno}"
                        f"{truncated}") from None


def _type_name(t) -> str:
    return {int: "an integer", str: "a string", list: "a list", dict: "an object"}[t]


def _field(path: str, where: str, obj, key: str, kind):
    """``obj[key]``, checked to be of ``kind`` (bool is not an integer here)."""
    if not isinstance(obj, dict):
        raise DataError(f"{path}: {where} is {type(obj).__name__} {obj!r:.40}, not an object")
    if key not in obj:
        raise DataError(f"{path}: {where}.{key} is missing")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise DataError(f"{path}: {where}.{key} is {json.dumps(value)[:40]}, not "
                        f"{_type_name(kind)}")
    return value


def _records(path: str, coco: dict, key: str, fields: dict, required: bool = True) -> list:
    if key not in coco:
        if required:
            raise DataError(f"{path}: the top-level '{key}' list is missing")
        return []
    items = coco[key]
    if not isinstance(items, list):
        raise DataError(f"{path}: '{key}' is {type(items).__name__}, not a list")
    seen = {}
    for i, item in enumerate(items):
        for name, kind in fields.items():
            _field(path, f"{key}[{i}]", item, name, kind)
        if item["id"] in seen:
            raise DataError(f"{path}: {key}[{i}] and {key}[{seen[item['id']]}] have the same id "
                            f"{item['id']}")
        seen[item["id"]] = i
    return items


def instances(path: str) -> tuple[list, list, list]:
    """(images, annotations, categories) of a COCO instances file, structure checked: every
    image has an integer id, height and width and a file name, ids are unique, every
    annotation names a listed image and category and has a finite [x, y, w, h] box."""
    coco = read(path, "COCO instances JSON")
    if not isinstance(coco, dict):
        raise DataError(f"{path} holds a {type(coco).__name__}, not COCO's object with 'images', "
                        "'annotations' and 'categories'")
    images = _records(path, coco, "images", _IMAGE_FIELDS)
    cats = _records(path, coco, "categories", _CATEGORY_FIELDS)
    anns = _records(path, coco, "annotations", _ANNOTATION_FIELDS, required=False)
    for i, im in enumerate(images):
        if im["height"] <= 0 or im["width"] <= 0:
            raise DataError(f"{path}: images[{i}] (id {im['id']}) is {im['width']}x"
                            f"{im['height']}")
    if any(c["id"] <= 0 for c in cats):
        raise DataError(f"{path}: category ids must be positive integers")
    image_ids, cat_ids = {im["id"] for im in images}, {c["id"] for c in cats}
    for i, a in enumerate(anns):
        where = f"{path}: annotations[{i}] (id {a['id']})"
        if a["image_id"] not in image_ids:
            raise DataError(f"{where} refers to image {a['image_id']}, which is not listed")
        if a["category_id"] not in cat_ids:
            raise DataError(f"{where} has category {a['category_id']}, which is not listed")
        box = a["bbox"]
        if len(box) != 4 or not all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                    and math.isfinite(v) for v in box):
            raise DataError(f"{where} has bbox {box!r:.60}; expected [x, y, width, height]")
    return images, anns, cats


def label_map(path: str) -> dict:
    """``label_map.json`` as prepare_dataset.py writes it: num_classes and the categories."""
    obj = read(path, "a label map")
    if not isinstance(obj, dict):
        raise DataError(f"{path} holds a {type(obj).__name__}, not an object with 'num_classes' "
                        "and 'categories'")
    num_classes = _field(path, "the label map", obj, "num_classes", int)
    cats = _records(path, obj, "categories", _CATEGORY_FIELDS)
    if num_classes < 1 or any(not 0 < c["id"] <= num_classes for c in cats):
        raise DataError(f"{path}: num_classes {num_classes} must be positive and at least every "
                        "category id")
    return obj
