"""COCO detection metrics with pycocotools, on detections put back into original-image pixels.

The detections of every rank are gathered first (``common/trainer.py``), so this runs once on
the whole split. Ground truth is the split's original annotation JSON (crowd regions included),
restricted to the images that were evaluated.
"""
from __future__ import annotations

import contextlib
import io

import numpy as np

from common.errors import DataError
from ssd import coco_json

STATS = ("AP", "AP50", "AP75", "APs", "APm", "APl", "AR1", "AR10", "AR100", "ARs", "ARm", "ARl")


def to_coco(outputs) -> list[dict]:
    """Per-image padded detections (normalised ymin, xmin, ymax, xmax) -> COCO result dicts."""
    results = []
    for i, image_id in enumerate(outputs["image_id"]):
        h, w = float(outputs["height"][i]), float(outputs["width"][i])
        for k in range(int(outputs["num_detections"][i])):
            y0, x0, y1, x1 = (float(v) for v in outputs["boxes"][i, k])
            results.append({"image_id": int(image_id), "category_id": int(outputs["classes"][i, k]),
                            "bbox": [x0 * w, y0 * h, (x1 - x0) * w, (y1 - y0) * h],
                            "score": float(outputs["scores"][i, k])})
    return results


def ground_truth(path: str):
    """A pycocotools COCO of ``path``, after ``coco_json.instances`` checked its structure."""
    from pycocotools.coco import COCO

    images, anns, cats = coco_json.instances(path)
    gt = COCO()
    gt.dataset = {"images": images, "annotations": anns, "categories": cats}
    with contextlib.redirect_stdout(io.StringIO()):
        gt.createIndex()
    return gt


def require_listed(gt, image_ids, path: str) -> None:
    """One line when an evaluated image is not in the ground truth (annotations of another
    dataset, or of another preparation)."""
    missing = sorted({int(i) for i in np.asarray(image_ids).ravel()} - set(gt.imgs))
    if missing:
        raise DataError(f"{path} does not list image id {missing[0]} of the validation records "
                        f"({len(missing)} such): are they another dataset's annotations? Prepare "
                        "the data again with ssd320/prepare_dataset.py")


def evaluate(gt, detections: list[dict], image_ids, path: str = "the ground truth") -> dict:
    """{AP, AP50, ..., ARl} (pycocotools' 12 numbers) against ``gt`` (``ground_truth``)."""
    from pycocotools.cocoeval import COCOeval

    require_listed(gt, image_ids, path)
    with contextlib.redirect_stdout(io.StringIO()):  # pycocotools narrates every step
        if not detections:
            return {name: 0.0 for name in STATS}
        dt = gt.loadRes(detections)
        ev = COCOeval(gt, dt, "bbox")
        ev.params.imgIds = sorted({int(i) for i in np.asarray(image_ids).ravel()})
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return {name: float(v) for name, v in zip(STATS, ev.stats)}
