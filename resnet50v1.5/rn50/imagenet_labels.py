"""ILSVRC2012's validation labels as the archives give them: the devkit's ground truth, or the
widely used file of one synset per validation image.

ImageNet's validation images come flat (``ILSVRC2012_img_val.tar``: ``ILSVRC2012_val_00000001
.JPEG`` ... ``_00050000.JPEG``), and their classes only in the devkit
(``ILSVRC2012_devkit_t12.tar.gz``): ``data/ILSVRC2012_validation_ground_truth.txt`` holds one
ILSVRC2012_ID a line, in file order, and ``data/meta.mat`` maps those ids to WordNet ids
(``n01440764``, the names of the training set's class folders). The ids are not in the order of
the folder names, so the ground truth cannot be read without ``meta.mat`` (MATLAB's format:
scipy reads it). Or, as TensorFlow's and many other scripts use, a text file of 50,000 WordNet
ids, one per validation image in file order (``imagenet_2012_validation_synset_labels.txt``).

``--val_labels`` takes either (the devkit as unpacked, its ``data`` folder or its ground-truth
file; or the synset file): ``validation_items`` returns [(image path, WordNet id)].
"""
from __future__ import annotations

import os
import re

from common.errors import DataError

GROUND_TRUTH = "ILSVRC2012_validation_ground_truth.txt"
VAL_IMAGE = re.compile(r"ILSVRC2012_val_(\d{8})\.JPEG$")
WNID = re.compile(r"n\d{8}$")


def _ground_truth_file(path: str) -> str | None:
    """The devkit's ground-truth file if ``path`` is it, its ``data`` folder or the devkit."""
    for candidate in (path, os.path.join(path, GROUND_TRUTH),
                      os.path.join(path, "data", GROUND_TRUTH)):
        if os.path.isfile(candidate) and os.path.basename(candidate) == GROUND_TRUTH:
            return candidate
    return None


def _read_lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [ln.strip() for ln in f if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {path}: {e}") from None


def devkit_synsets(ground_truth: str) -> list[str]:
    """The WordNet id of each validation image, in file order, from the devkit."""
    meta = os.path.join(os.path.dirname(ground_truth), "meta.mat")
    if not os.path.isfile(meta):
        raise DataError(f"{meta} does not exist: the devkit's ground truth names classes by "
                        "ILSVRC2012_ID, which only meta.mat beside it maps to WordNet ids")
    if os.path.getsize(meta) == 0:
        raise DataError(f"{meta} is empty (an extraction cut short?): unpack "
                        "ILSVRC2012_devkit_t12.tar.gz again")
    try:
        import scipy.io
        from scipy.io.matlab import MatReadError
    except ImportError as e:
        raise DataError(f"reading {meta} needs scipy ({e})") from None
    try:
        synsets = scipy.io.loadmat(meta, squeeze_me=True)["synsets"]
        by_id = {int(s["ILSVRC2012_ID"]): str(s["WNID"]) for s in synsets}
    except (MatReadError, OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise DataError(f"{meta} is not the ILSVRC2012 devkit's meta.mat "
                        f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    out = []
    for n, line in enumerate(_read_lines(ground_truth), 1):
        if not line.isdigit() or int(line) not in by_id:
            raise DataError(f"{ground_truth}:{n}: {line!r} is not an ILSVRC2012_ID of meta.mat")
        out.append(by_id[int(line)])
    return out


def synset_file(path: str) -> list[str]:
    lines = _read_lines(path)
    for n, line in enumerate(lines, 1):
        if not WNID.match(line):
            raise DataError(f"{path}:{n}: {line!r} is not a WordNet id (n########): expected one "
                            "synset per validation image, in file order")
    return lines


def validation_items(val_dir: str, labels: str) -> list[tuple[str, str]]:
    """[(image path, WordNet id)] for the flat validation folder."""
    if not os.path.exists(labels):
        raise DataError(f"--val_labels {labels} does not exist")
    ground_truth = _ground_truth_file(labels)
    if ground_truth is None and os.path.isdir(labels):
        raise DataError(f"--val_labels {labels} is a folder without the devkit's ground truth "
                        f"(data/{GROUND_TRUTH}): give the unpacked ILSVRC2012_devkit_t12, or a "
                        "file of one synset per validation image")
    synsets = devkit_synsets(ground_truth) if ground_truth else synset_file(labels)
    images = {}
    for name in os.listdir(val_dir):
        m = VAL_IMAGE.match(name)
        if m:
            images[int(m.group(1))] = os.path.join(val_dir, name)
    if not images:
        raise DataError(f"{val_dir} holds no ILSVRC2012_val_########.JPEG images (the flat "
                        "validation folder that ILSVRC2012_img_val.tar unpacks to)")
    beyond = [n for n in images if n > len(synsets)]
    if beyond:
        raise DataError(f"{images[min(beyond)]} has no label: {labels} lists {len(synsets)} "
                        "images")
    return [(images[n], synsets[n - 1]) for n in sorted(images)]
