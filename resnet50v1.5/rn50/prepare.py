"""ImageNet-style folder -> sharded TFRecords (+ DALI index files and labels.txt).

Input layout (that of ImageNet after the usual extraction)::

    <src>/train/<class>/*.JPEG
    <src>/val/<class>/*.JPEG              (either this ...)
    <src>/val/*.JPEG + <src>/val_labels.txt   (... or flat images and "<file> <class>" lines,
    <src>/val/ILSVRC2012_val_*.JPEG + --val_labels   ... or ILSVRC2012's own: the devkit's
                                                  ground truth, or a file of synsets; see
                                                  rn50/imagenet_labels.py)

Output: ``train-XXXXX-of-YYYYY`` and ``validation-XXXXX-of-YYYYY`` with ``image/encoded`` (JPEG
bytes; every image is decoded in full first, and other formats are re-encoded as JPEG) and
``image/class/label`` (1..N in the sorted order of the class folder names), ``labels.txt`` (the
class names, one a line) and ``idx/*.idx``. Shards are written as ``*.tmp`` and renamed when
complete; an earlier preparation's shards of the same split are removed first.
"""
from __future__ import annotations

import os
import random
from collections.abc import Iterable, Sequence

if __name__ == "__main__":  # python -m rn50.prepare: the scripts' start (common/entry.py), from
    import sys  # a wheel too, before this module's imports bring TensorFlow in unfiltered

    from common import entry
    sys.exit(entry.main_of("rn50.prepare:main")("python -m rn50.prepare"))

from common.data import prepare_cli, tfrecord_writer
from common.data.images import jpeg_bytes
from common.errors import DataError
from rn50 import imagenet_labels

IMAGE_EXTENSIONS = (".jpeg", ".jpg", ".png", ".bmp")


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def list_split(src: str, split: str, classes: Sequence[str] | None = None, log=None):
    """[(path, class name)] for ``split`` ("train" or "val") and the sorted class names; a
    class folder that is a link out of the split's folder is read, and ``log`` says so."""
    root = os.path.join(src, split)
    if not os.path.isdir(root):
        raise DataError(f"{root} does not exist")
    labels_file = os.path.join(src, f"{split}_labels.txt")
    if os.path.exists(labels_file):
        items = []
        with open(labels_file) as f:
            for n, line in enumerate(f, 1):
                parts = line.split()
                if not parts:
                    continue
                if len(parts) != 2:
                    raise DataError(f"{labels_file}:{n}: expected '<file> <class>'")
                items.append((os.path.join(root, parts[0]), parts[1]))
    else:
        tars = [f for f in os.listdir(root) if f.endswith(".tar")]
        if tars and not any(os.path.isdir(os.path.join(root, f)) for f in os.listdir(root)):
            raise DataError(f"{root} holds {len(tars)} per-class tars (ILSVRC2012_img_train.tar "
                            "unpacked once): unpack each into its class folder, as "
                            "resnet50v1.5/README.md shows under Getting the data")
        items = [(os.path.join(root, c, f), c)
                 for c in sorted(os.listdir(root)) if os.path.isdir(os.path.join(root, c))
                 for f in sorted(os.listdir(os.path.join(root, c))) if _is_image(f)]
        real = os.path.realpath(root)
        outside = [c for c in sorted(os.listdir(root)) if os.path.islink(os.path.join(root, c))
                   and os.path.isdir(os.path.join(root, c)) and not os.path.realpath(
                       os.path.join(root, c)).startswith(real + os.sep)]
        if outside and log:
            log(f"note: {len(outside)} class folder(s) of {root} are links out of it (first: "
                f"{outside[0]} -> {os.path.realpath(os.path.join(root, outside[0]))}); their "
                "images are read as those classes")
    if not items:
        raise DataError(f"no images found under {root}")
    found = sorted({c for _, c in items})
    if classes is not None:
        _refuse_unknown_classes(items, classes, split)
        found = list(classes)
    return items, found


def _refuse_unknown_classes(items, classes: Sequence[str], what: str) -> None:
    unknown = sorted({c for _, c in items} - set(classes))
    if unknown:
        raise DataError(f"{what} has classes that train lacks: {unknown[:5]}")


def _example(jpeg: bytes, label: int, name: str):
    import tensorflow as tf

    def feature(value):
        if isinstance(value, int):
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
    return tf.train.Example(features=tf.train.Features(feature={
        "image/encoded": feature(jpeg), "image/class/label": feature(label),
        "image/class/synset": feature(name.encode()), "image/format": feature(b"JPEG"),
    })).SerializeToString()


def write_split(items, classes, out_dir: str, prefix: str, shards: int, seed: int,
                log=print) -> list[str]:
    index = {c: i + 1 for i, c in enumerate(classes)}  # labels 1..N, as in ImageNet TFRecords
    items = list(items)
    random.Random(seed).shuffle(items)  # mix classes across shards
    return tfrecord_writer.write_shards(
        items, lambda item: _example(jpeg_bytes(item[0]), index[item[1]], item[1]), out_dir,
        prefix, shards, log, unit="images")


def prepare(src: str, out_dir: str, train_shards: int, val_shards: int, seed: int = 0,
            log=print, val_labels: str | None = None) -> dict:
    train, classes = list_split(src, "train", log=log)
    if val_labels:
        val = imagenet_labels.validation_items(os.path.join(src, "val"), val_labels)
        _refuse_unknown_classes(val, classes, f"--val_labels {val_labels}")
    else:
        val, _ = list_split(src, "val", classes, log=log)
    with prepare_cli.staged(out_dir, log) as stage:
        with open(os.path.join(stage, "labels.txt"), "w") as f:
            f.write("".join(c + "\n" for c in classes))
        write_split(train, classes, stage, "train", train_shards, seed, log)
        write_split(val, classes, stage, "validation", val_shards, seed, log)
    log(f"wrote {len(train)} train and {len(val)} validation images of {len(classes)} classes "
        f"to {out_dir} (index files in {out_dir}/idx)")
    return {"classes": len(classes), "train": len(train), "validation": len(val)}


def main(argv: Iterable[str] | None = None) -> int:
    def arguments(p):
        p.add_argument("src", help="folder with train/ and val/")
        p.add_argument("out_dir", help="where the TFRecords go")
        prepare_cli.add_shards(p, train=1024, val=128)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--val_labels", default=None, help="ILSVRC2012's validation classes for "
                       "a flat val/ folder: the devkit (ILSVRC2012_devkit_t12, as unpacked) or a "
                       "file of one synset per validation image, in file order")
    return prepare_cli.main(__doc__, arguments, lambda a: prepare(
        a.src, a.out_dir, a.train_shards, a.val_shards, a.seed, val_labels=a.val_labels), argv)
