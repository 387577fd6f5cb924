"""The dataset guides of the model READMEs, run as written on small trees made in exactly the
archives' layouts: ILSVRC2012's tar of per-class tars, flat validation tar and devkit (whose
ground truth names classes by ILSVRC2012_ID, mapped to WordNet ids by meta.mat), and COCO 2017's
three zips. WikiText-103's is in test_txl_prepare.py."""
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile

import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, run_cli, stderr_last_line

from common.data import tfrecord_index

pytestmark = pytest.mark.one_stack(
    "pip", "the guides unpack the archives with the shell; the preparation they end in is "
    "tested on both stacks elsewhere")

# meta.mat's ILSVRC2012_IDs do not follow the folder names' order, as in the real devkit
# (id 1 is n02119789, kit fox; n01440764, tench, is id 449).
IDS = {"n15075141": 1, "n01440764": 2, "n01443537": 3}
WNIDS = sorted(IDS)


def _guide(readme: str, marker: str) -> str:
    """The README's bash block that holds ``marker``."""
    text = open(os.path.join(ROOT, readme)).read()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    found = [b for b in blocks if marker in b]
    assert len(found) == 1, f"{readme}: {len(found)} bash blocks hold {marker!r}"
    return found[0]


def _run_guide(block: str, env: dict, tmp_path):
    script = tmp_path / "guide.sh"
    script.write_text("set -euo pipefail\n" + block.replace("python ", f"{sys.executable} "))
    return subprocess.run(["bash", str(script)], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **env}, timeout=600)


def _jpeg(seed: int) -> bytes:
    pixels = np.random.RandomState(seed).randint(0, 255, (40, 48, 3), dtype=np.uint8)
    return tf.io.encode_jpeg(pixels).numpy()


def _add(tar, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _imagenet_archives(dl) -> dict[bytes, str]:
    """The three ILSVRC2012 archives in ``dl``; returns each validation image's class."""
    import scipy.io
    dl.mkdir()
    with tarfile.open(dl / "ILSVRC2012_img_train.tar", "w") as outer:
        for k, wnid in enumerate(WNIDS):
            inner = io.BytesIO()
            with tarfile.open(fileobj=inner, mode="w") as t:
                for i in range(2):
                    _add(t, f"{wnid}_{i + 1}.JPEG", _jpeg(10 * k + i))
            _add(outer, f"{wnid}.tar", inner.getvalue())
    classes = [WNIDS[(i * 2) % 3] for i in range(6)]
    val = {}
    with tarfile.open(dl / "ILSVRC2012_img_val.tar", "w") as t:
        for i, wnid in enumerate(classes):
            data = _jpeg(100 + i)
            _add(t, f"ILSVRC2012_val_{i + 1:08d}.JPEG", data)
            val[data] = wnid
    kit = dl / "ILSVRC2012_devkit_t12"
    (kit / "data").mkdir(parents=True)
    (kit / "data" / "ILSVRC2012_validation_ground_truth.txt").write_text(
        "".join(f"{IDS[w]}\n" for w in classes))
    # 1,860 synsets in the real file: the 1,000 leaves (ids 1..1000) and their ancestors.
    synsets = np.zeros((4, 1), dtype=[("ILSVRC2012_ID", "O"), ("WNID", "O"), ("words", "O"),
                                      ("num_children", "O")])
    for wnid, sid in IDS.items():
        synsets[sid - 1, 0] = (sid, wnid, wnid, 0)
    synsets[3, 0] = (4, "n00001740", "entity", 3)
    scipy.io.savemat(str(kit / "data" / "meta.mat"), {"synsets": synsets})
    with tarfile.open(dl / "ILSVRC2012_devkit_t12.tar.gz", "w:gz") as t:
        t.add(kit, arcname="ILSVRC2012_devkit_t12")
    shutil.rmtree(kit)
    return val


def _records(out, prefix):
    files = tfrecord_index.shard_files(str(out), prefix, prefix)
    feats = {"image/encoded": tf.io.FixedLenFeature([], tf.string),
             "image/class/synset": tf.io.FixedLenFeature([], tf.string),
             "image/class/label": tf.io.FixedLenFeature([], tf.int64)}
    for raw in tf.data.TFRecordDataset(files):
        ex = tf.io.parse_single_example(raw, feats)
        yield (ex["image/encoded"].numpy(), ex["image/class/synset"].numpy().decode(),
               int(ex["image/class/label"]))


def test_imagenet_from_its_archives_with_the_devkits_labels(tmp_path):
    """The README's commands on ILSVRC2012's archives: every validation image gets the class
    the devkit gives it (through meta.mat, not the id's position among the folder names), and
    the labels are 1..N in the folders' order, as for training."""
    val = _imagenet_archives(tmp_path / "dl")
    proc = _run_guide(_guide("resnet50v1.5/README.md", "ILSVRC2012_img_train.tar"),
                      {"DL": str(tmp_path / "dl"), "RAW": str(tmp_path / "raw"),
                       "OUT": str(tmp_path / "imagenet")}, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = list(_records(tmp_path / "imagenet", "validation"))
    assert len(got) == 6
    for data, synset, label in got:
        assert synset == val[data] and label == WNIDS.index(synset) + 1
    assert len(list(_records(tmp_path / "imagenet", "train"))) == 6
    assert (tmp_path / "imagenet" / "labels.txt").read_text().split() == WNIDS


def test_the_widely_used_synset_file_gives_the_same_records(tmp_path):
    val = _imagenet_archives(tmp_path / "dl")
    raw = tmp_path / "raw"
    (raw / "val").mkdir(parents=True)
    with tarfile.open(tmp_path / "dl" / "ILSVRC2012_img_val.tar") as t:
        t.extractall(raw / "val", filter="data")
    (raw / "train").mkdir()
    for wnid in WNIDS:
        (raw / "train" / wnid).mkdir()
        (raw / "train" / wnid / "a.JPEG").write_bytes(_jpeg(7))
    names = sorted(os.listdir(raw / "val"))
    synsets = tmp_path / "imagenet_2012_validation_synset_labels.txt"
    synsets.write_text("".join(val[(raw / "val" / n).read_bytes()] + "\n" for n in names))
    proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "prepare_dataset.py"),
                    str(raw), str(tmp_path / "out"), "--val_labels", str(synsets)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert all(s == val[d] for d, s, _ in _records(tmp_path / "out", "validation"))
    # A devkit without meta.mat, or a file that is not synsets: one line each.
    bad = tmp_path / "bad.txt"
    bad.write_text("n01440764\n449\n")
    proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "prepare_dataset.py"),
                    str(raw), str(tmp_path / "out2"), "--val_labels", str(bad)])
    assert proc.returncode == 1 and stderr_last_line(proc) == (
        f"prepare_dataset.py: error: {bad}:2: '449' is not a WordNet id (n########): expected "
        "one synset per validation image, in file order")


def test_train_left_as_per_class_tars_is_named(tmp_path):
    _imagenet_archives(tmp_path / "dl")
    raw = tmp_path / "raw"
    (raw / "train").mkdir(parents=True)
    (raw / "val").mkdir()
    with tarfile.open(tmp_path / "dl" / "ILSVRC2012_img_train.tar") as t:
        t.extractall(raw / "train", filter="data")
    proc = run_cli([sys.executable, os.path.join(ROOT, "resnet50v1.5", "prepare_dataset.py"),
                    str(raw), str(tmp_path / "out")])
    assert proc.returncode == 1 and "per-class tars" in stderr_last_line(proc)


def test_coco_2017_from_its_three_zips(tmp_path):
    """COCO 2017's zips unpack to train2017/, val2017/ and annotations/ (with the captions and
    keypoints files beside the instances ones): the README's commands convert them."""
    from ssd import shapes
    src = tmp_path / "src"
    shapes.export(str(src), train=6, val=3, seed=1)
    dl = tmp_path / "dl"
    dl.mkdir()
    for name, folder in (("train2017", "train2017"), ("val2017", "val2017"),
                         ("annotations_trainval2017", "annotations")):
        with zipfile.ZipFile(dl / f"{name}.zip", "w") as z:
            for f in sorted(os.listdir(src / folder)):
                z.write(src / folder / f, f"{folder}/{f}")
            if folder == "annotations":
                for other in ("captions", "person_keypoints"):
                    for split in ("train2017", "val2017"):
                        z.writestr(f"annotations/{other}_{split}.json", "{}")
    proc = _run_guide(_guide("ssd320/README.md", "unzip -q -o"),
                      {"DL": str(dl), "COCO": str(tmp_path / "coco"),
                       "OUT": str(tmp_path / "records")}, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert os.path.exists(tmp_path / "records" / "validation_annotations.json")
    # Every image of each zip is one record, with its annotations' boxes and classes.
    for prefix, split in (("train", "train2017"), ("validation", "val2017")):
        made = json.load(open(src / "annotations" / f"instances_{split}.json"))
        want = {i["id"]: sorted(a["category_id"] for a in made["annotations"]
                                if a["image_id"] == i["id"]) for i in made["images"]}
        files = tfrecord_index.shard_files(str(tmp_path / "records"), prefix, prefix)
        feats = {"image/id": tf.io.FixedLenFeature([], tf.int64),
                 "image/object/class/label": tf.io.VarLenFeature(tf.int64),
                 "image/object/bbox/xmin": tf.io.VarLenFeature(tf.float32)}
        got = {}
        for raw in tf.data.TFRecordDataset(files):
            ex = tf.io.parse_single_example(raw, feats)
            assert len(ex["image/object/bbox/xmin"].values) == \
                len(ex["image/object/class/label"].values)
            got[int(ex["image/id"])] = sorted(ex["image/object/class/label"].values.numpy())
        assert got == want and sum(map(len, got.values())) == len(made["annotations"]), prefix


def _flat_imagenet(tmp_path):
    """train/<wnid>/ folders and a flat val/ of two ILSVRC2012_val images."""
    raw = tmp_path / "raw"
    for wnid in WNIDS:
        (raw / "train" / wnid).mkdir(parents=True)
        (raw / "train" / wnid / "a.JPEG").write_bytes(_jpeg(1))
    (raw / "val").mkdir()
    for i in (1, 2):
        (raw / "val" / f"ILSVRC2012_val_{i:08d}.JPEG").write_bytes(_jpeg(i))
    return raw


def _prepare(capsys, *argv):
    from rn50 import prepare
    code = prepare.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, [ln for ln in err.splitlines() if ln.strip()]


def test_a_cut_devkit_is_one_line(tmp_path, capsys):
    """A 0-byte meta.mat (a cut extraction) was scipy's MatReadError traceback; a devkit folder
    without its ground truth was read as a synset file (IsADirectoryError)."""
    raw = _flat_imagenet(tmp_path)
    kit = tmp_path / "ILSVRC2012_devkit_t12"
    (kit / "data").mkdir(parents=True)
    (kit / "data" / "ILSVRC2012_validation_ground_truth.txt").write_text("1\n2\n")
    (kit / "data" / "meta.mat").write_bytes(b"")
    code, _, err = _prepare(capsys, raw, tmp_path / "out", "--val_labels", kit)
    assert code == 1 and err == [f"prepare_dataset.py: error: {kit / 'data' / 'meta.mat'} is "
                                 "empty (an extraction cut short?): unpack "
                                 "ILSVRC2012_devkit_t12.tar.gz again"]
    (kit / "data" / "meta.mat").write_bytes(b"MATLAB 5.0 MAT-file" + b"\0" * 40)  # cut later
    code, _, err = _prepare(capsys, raw, tmp_path / "out", "--val_labels", kit)
    assert code == 1 and len(err) == 1 and "is not the ILSVRC2012 devkit's meta.mat" in err[0]
    os.remove(kit / "data" / "ILSVRC2012_validation_ground_truth.txt")
    code, _, err = _prepare(capsys, raw, tmp_path / "out", "--val_labels", kit)
    assert code == 1 and err == [
        f"prepare_dataset.py: error: --val_labels {kit} is a folder without the devkit's ground "
        "truth (data/ILSVRC2012_validation_ground_truth.txt): give the unpacked "
        "ILSVRC2012_devkit_t12, or a file of one synset per validation image"]
    assert not (tmp_path / "out").exists()


def test_a_class_folder_linked_from_outside_is_read_with_a_note(tmp_path, capsys):
    raw = tmp_path / "raw"
    elsewhere = tmp_path / "elsewhere" / "n09999999"
    elsewhere.mkdir(parents=True)
    (elsewhere / "a.JPEG").write_bytes(_jpeg(3))
    for split in ("train", "val"):
        (raw / split / WNIDS[0]).mkdir(parents=True)
        (raw / split / WNIDS[0] / "a.JPEG").write_bytes(_jpeg(4))
    os.symlink(elsewhere, raw / "train" / "n09999999")
    code, out, err = _prepare(capsys, raw, tmp_path / "out", "--train_shards", "1",
                              "--val_shards", "1")
    assert code == 0, err
    assert (f"note: 1 class folder(s) of {raw / 'train'} are links out of it (first: n09999999 "
            f"-> {elsewhere}); their images are read as those classes") in out
    assert (tmp_path / "out" / "labels.txt").read_text().split() == [WNIDS[0], "n09999999"]
