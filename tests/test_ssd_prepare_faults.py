"""SSD320's preparation under faults, through prepare_dataset.py (or its main in this process):
every structural error in a user's COCO file is one line naming the file and field, what the
data would make of the model is said (boxes past 100, a head of mostly unused classes), and an
output that cannot be written, or a stop signal, leaves the previous preparation whole. The
runs over prepared data are tests/test_ssd_faults.py's."""
import json
import os
import sys

import pytest
import tensorflow as tf
from conftest import OWN_HANDLING, ROOT, run_cli, stderr_last_line
from reliability_helpers import digests, tmpfs

from ssd import prepare, shapes

PREPARE = os.path.join(ROOT, "ssd320", "prepare_dataset.py")

# The preparation's file handling is this repository's Python: in one suite.
OWN_FILES_ONLY = pytest.mark.one_stack(
    "pip", "the preparation is this repository's Python and the file system's; the pipelines "
    "reading what it writes run on both stacks")


@OWN_HANDLING
def test_prepare_keeps_the_100_largest_boxes_and_says_so(tmp_path):
    root = tmp_path / "coco"
    shapes.export(str(root), train=3, val=2, seed=5)
    path = root / "annotations" / "instances_train2017.json"
    coco = json.loads(path.read_text())
    image = coco["images"][0]
    extra = [{"id": 10_000 + i, "image_id": image["id"], "category_id": 1, "iscrowd": 0,
              "bbox": [1.0, 1.0, 2.0 + (i % 50) * 0.1, 2.0], "area": 4.0} for i in range(120)]
    coco["annotations"] += extra
    path.write_text(json.dumps(coco))
    lines = []
    prepare.prepare(str(root), str(tmp_path / "out"), 1, 1, log=lines.append)
    assert "train: 1 image(s) have more than 100 boxes; their 100 largest are kept" in lines
    counts = []
    for raw in tf.data.TFRecordDataset(str(next((tmp_path / "out").glob("train-*")))):
        ex = tf.train.Example.FromString(raw.numpy())
        counts.append(len(ex.features.feature["image/object/class/label"].int64_list.value))
    assert max(counts) == 100


def _bad_annotations(coco, fault):
    if fault == "duplicate image id":
        coco["images"][1]["id"] = coco["images"][0]["id"]
    elif fault == "missing height":
        del coco["images"][0]["height"]
    elif fault == "images not a list":
        coco["images"] = {"0": coco["images"][0]}
    elif fault == "width a string":
        coco["images"][0]["width"] = str(coco["images"][0]["width"])
    elif fault == "missing id":
        del coco["annotations"][0]["id"]
    elif fault == "no images":
        coco["images"], coco["annotations"] = [], []
    elif fault == "box outside":
        coco["annotations"][0]["bbox"] = [100.0, 5.0, 500.0, 20.0]
    elif fault == "unknown category":
        coco["annotations"][0]["category_id"] = 99
    elif fault == "unknown image":
        coco["annotations"][0]["image_id"] = 12345
    return coco


@pytest.mark.parametrize("fault, message", [
    ("binary", "is not COCO instances JSON: byte 0 is not UTF-8 (a binary file?)"),
    ("truncated", "is not COCO instances JSON: "),
    ("duplicate image id", ": images[1] and images[0] have the same id "),
    ("missing height", ": images[0].height is missing"),
    ("images not a list", ": 'images' is dict, not a list"),
    ("width a string", ": images[0].width is \""),
    ("missing id", ": annotations[0].id is missing"),
    ("no images", " lists no images: the train2017 split would be empty"),
    ("box outside", ": annotations[0] (id 1) has bbox [100.0, 5.0, 500.0, 20.0] outside its "),
    ("unknown category", ": annotations[0] (id 1) has category 99, which is not listed"),
    ("unknown image", ": annotations[0] (id 1) refers to image 12345, which is not listed"),
])


@OWN_FILES_ONLY
def test_prepare_names_the_file_and_field_of_a_structural_error(tmp_path, capsys, fault,
                                                                message):
    """Through prepare_dataset.py for the first case; the others call its main in this process
    (the same function and error line, without a TensorFlow start-up each)."""
    root = tmp_path / "coco"
    shapes.export(str(root), train=3, val=2, seed=5)
    path = root / "annotations" / "instances_train2017.json"
    if fault == "binary":
        path.write_bytes(b"\xff\xd8\xff\xe0" + os.urandom(64))
    elif fault == "truncated":
        path.write_bytes(path.read_bytes()[:-30])
    else:
        path.write_text(json.dumps(_bad_annotations(json.loads(path.read_text()), fault)))
    if fault == "binary":
        proc = run_cli([sys.executable, PREPARE, str(root), str(tmp_path / "out")])
        code, err = proc.returncode, proc.stderr
    else:
        code, err = prepare.main([str(root), str(tmp_path / "out")]), capsys.readouterr().err
    last = err.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in err
    assert last.startswith(f"prepare_dataset.py: error: {path}") and message in last, last
    assert not (tmp_path / "out" / "label_map.json").exists()


@OWN_FILES_ONLY
def test_prepare_into_a_full_disk_keeps_the_previous_preparation(tmp_path):
    root = tmp_path / "coco"
    shapes.export(str(root), train=4, val=2, seed=5)
    with tmpfs(tmp_path / "disk", 1200) as disk:
        out = os.path.join(disk, "out")
        prepare.prepare(str(root), out, 1, 1, log=lambda *_: None)
        before = digests(out)
        big = tmp_path / "big"
        shapes.export(str(big), train=200, val=2, seed=6)  # does not fit beside it
        proc = run_cli([sys.executable, PREPARE, str(big), out])
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert stderr_last_line(proc).startswith(f"prepare_dataset.py: error: cannot write the "
                                                 f"preparation to {out} (No space left on device; ")
        assert digests(out) == before


@OWN_FILES_ONLY
def test_prepare_into_a_file_is_one_line(tmp_path):
    root = tmp_path / "coco"
    shapes.export(str(root), train=2, val=2, seed=5)
    (tmp_path / "out").write_text("not a directory")
    proc = run_cli([sys.executable, PREPARE, str(root), str(tmp_path / "out")])
    assert proc.returncode == 1
    assert stderr_last_line(proc) == (f"prepare_dataset.py: error: the output directory "
                                      f"{tmp_path / 'out'} is a file, not a directory")


@OWN_HANDLING
def test_prepare_says_when_category_ids_would_make_a_huge_mostly_untrained_head(tmp_path):
    """Category ids far above the number of categories (x1000 here) set num_classes to the
    largest id: a head of thousands of columns, said at preparation, not silently."""
    root = tmp_path / "coco"
    shapes.export(str(root), train=3, val=2, seed=5)
    for split in ("train2017", "val2017"):
        path = root / "annotations" / f"instances_{split}.json"
        coco = json.loads(path.read_text())
        for c in coco["categories"]:
            c["id"] *= 1000
        for a in coco["annotations"]:
            a["category_id"] *= 1000
        path.write_text(json.dumps(coco))
    lines = []
    prepare.prepare(str(root), str(tmp_path / "out"), 1, 1, log=lines.append)
    n = len(coco["categories"])
    top = max(c["id"] for c in coco["categories"])
    assert lines[-1] == (f"note: category ids reach {top} for {n} categories: the model gets "
                         f"{top + 1} class columns, most of them never trained; renumber the "
                         f"categories (and their annotations) 1..N for a head of N + 1")


@OWN_FILES_ONLY
def test_sigterm_during_preparation_removes_the_staging_and_keeps_the_previous(tmp_path):
    """A preparation stopped by SIGTERM (a scheduler's stop) removes its staging directory on
    the way out, finished shards included, says so in one whole line, and leaves the previous
    preparation as it was."""
    import signal
    import subprocess
    import time
    root = tmp_path / "coco"
    shapes.export(str(root), train=240, val=4, seed=5)
    out = tmp_path / "out"
    prepare.prepare(str(root), str(out), 2, 1, log=lambda *_: None)
    before = digests(out)
    proc = subprocess.Popen([sys.executable, PREPARE, str(root), str(out), "--train_shards",
                             "24", "--val_shards", "1"], stderr=subprocess.PIPE, text=True)
    stage = out / ".preparing"
    deadline = time.time() + 120
    while time.time() < deadline and not (stage.exists() and any(
            p.name.startswith("train-") and not p.name.endswith(".tmp")
            for p in stage.iterdir())):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert err.strip().splitlines()[-1] == ("prepare_dataset.py: interrupted (SIGTERM); the "
                                            "previous preparation is unchanged")
    assert not stage.exists() and digests(out) == before
