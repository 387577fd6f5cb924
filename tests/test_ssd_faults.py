"""SSD320 under faults, through main.py's code path: a bad evaluation split never costs the
training before it, bad data gets the same answer from both pipelines, a user's label map
without its keys is one line, outputs are checked before the work that fills them, and flags
the validators used to miss. The preparation's faults (prepare_dataset.py) are
tests/test_ssd_prepare_faults.py's."""
import json
import os
import shutil
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from conftest import OWN_HANDLING, ROOT, run_cli, stderr_last_line
from conftest import TINY as PRESET_TINY
from reliability_helpers import (
    ckpt_digests,
    damaged_copy,
    digests,
    main_in_process,
    tmpfs,
    trained_steps,
)

from common import runner
from common.data import tfrecord_index
from ssd.task import SSDTask

TINY = [*PRESET_TINY, "--iter_unit", "batch", "--seed", "1"]  # ssd/config.py's PRESETS


# The drawings' and the export's file handling is this repository's Python: in one suite.
OWN_FILES_ONLY = pytest.mark.one_stack(
    "pip", "the drawings, the export's space check and its swap are this repository's Python "
    "and the file system's; the pipelines and models they write from run on both stacks")


def _main(capsys, *args) -> tuple[int, str]:
    return main_in_process(SSDTask, capsys, [*TINY, *args])


def _rewrite_records(path, edit):
    """Rewrites a TFRecord file with ``edit(tf.train.Example)`` applied to each record."""
    examples = []
    for raw in tf.data.TFRecordDataset(str(path)):
        ex = tf.train.Example.FromString(raw.numpy())
        edit(ex)
        examples.append(ex.SerializeToString())
    with tf.io.TFRecordWriter(str(path)) as w:
        for e in examples:
            w.write(e)
    tfrecord_index.write_index(str(path), tfrecord_index.index_path(
        os.path.join(os.path.dirname(path), "idx"), str(path)))


# --- a bad evaluation split never costs the training before it ------------------------------
@OWN_HANDLING
@pytest.mark.parametrize("fault, message", [
    ("missing annotations", "validation_annotations.json is missing: prepare the data with "),
    ("other dataset", "validation_annotations.json does not list image id "),
    ("truncated annotations", "validation_annotations.json is not COCO instances JSON: "),
    ("no validation records", "no validation-NNNNN-of-NNNNN TFRecord files in "),
])
def test_a_bad_evaluation_split_stops_before_step_1(shapes_records, tmp_path, capsys, fault,
                                                   message):
    data = damaged_copy(shapes_records, tmp_path)
    gt = data / "validation_annotations.json"
    if fault == "missing annotations":
        gt.unlink()
    elif fault == "other dataset":
        coco = json.loads(gt.read_text())
        for im in coco["images"]:
            im["id"] += 1000
        for a in coco["annotations"]:
            a["image_id"] += 1000
        gt.write_text(json.dumps(coco))
    elif fault == "truncated annotations":
        gt.write_bytes(gt.read_bytes()[:200])
    else:
        for f in data.glob("validation-*"):
            f.unlink()
    out = tmp_path / "r"
    code, last = _main(capsys, "--mode", "train_and_evaluate", "--num_iter", "2", "--data_dir",
                       str(data), "--results_dir", str(out))
    assert code == 1 and message in last and last.startswith("main.py: error: "), last
    assert trained_steps(out) == 0 and not list((out / "checkpoints").glob("ckpt-*"))


@OWN_HANDLING
# `make test-slow` (the suite's time budget): a stopped run's saved training is test_runtime's (a
# NaN loss, SIGTERM).
@pytest.mark.slow
def test_an_evaluation_that_fails_midway_finds_its_training_saved(shapes_records, tmp_path,
                                                                    capsys):
    """The first batch reads (checked before step 1); a later record is corrupt: the run stops
    at the evaluation, with the checkpoint of the step before it already on disk."""
    data = damaged_copy(shapes_records, tmp_path)
    (shard,) = data.glob("validation-*")
    entries = tfrecord_index.scan(str(shard))
    offset, size = entries[-1]  # the last of 8 records: the evaluation's second batch
    raw = bytearray(shard.read_bytes())
    raw[offset + 12 + size // 2] ^= 0xFF  # a byte of its data: the record's CRC fails
    shard.write_bytes(bytes(raw))
    out = tmp_path / "r"
    code, last = _main(capsys, "--mode", "train_and_evaluate", "--num_iter", "3", "--data_dir",
                       str(data), "--results_dir", str(out))
    assert code == 1 and f"{shard}, record 7: " in last, last
    assert sorted(ckpt_digests(out / "checkpoints")) == ["ckpt-3.data-00000-of-00001",
                                                         "ckpt-3.index"]


# --- bad data: the same answer from both pipelines -----------------------------------------
@pytest.mark.parametrize("dali", [False, True])
def test_a_record_failing_its_checksum_is_refused_by_both_pipelines(shapes_records, tmp_path,
                                                                    capsys, dali):
    data = damaged_copy(shapes_records, tmp_path)
    shard = sorted(data.glob("train-*"))[0]
    offset, size = tfrecord_index.scan(str(shard))[2]
    raw = bytearray(shard.read_bytes())
    raw[offset + 12 + size // 2] ^= 0x01
    shard.write_bytes(bytes(raw))
    code, last = _main(capsys, "--mode", "train", "--num_iter", "2", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"), *(["--dali"] if dali else []))
    assert code == 1 and last.startswith("main.py: error: cannot read the input data: ")
    assert f"{shard}, record 2: " in last, last


@pytest.mark.parametrize("dali", [False, True])
def test_a_record_with_more_than_100_boxes_is_refused_by_both_pipelines(shapes_records,
                                                                        tmp_path, capsys, dali):
    data = damaged_copy(shapes_records, tmp_path)
    shard = sorted(data.glob("train-*"))[0]

    def crowd(ex):
        f = ex.features.feature
        f["image/object/class/label"].int64_list.value[:] = [1] * 101
        for k, v in (("ymin", 0.1), ("xmin", 0.1), ("ymax", 0.5), ("xmax", 0.5)):
            f[f"image/object/bbox/{k}"].float_list.value[:] = [v] * 101
    _rewrite_records(shard, crowd)
    code, last = _main(capsys, "--mode", "train", "--num_iter", "2", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"), *(["--dali"] if dali else []))
    assert code == 1 and f"{shard}, record 0: the image has 101 boxes, more than 100" in last, \
        last


@OWN_HANDLING
@pytest.mark.parametrize("content, message", [
    ({"categories": []}, "label_map.json: the label map.num_classes is missing"),
    ({"num_classes": 4}, "label_map.json: the top-level 'categories' list is missing"),
    ([1, 2], "label_map.json holds a list, not an object"),
])
def test_a_label_map_without_its_keys_is_one_line(shapes_records, tmp_path, capsys, content,
                                                  message):
    data = damaged_copy(shapes_records, tmp_path)
    (data / "label_map.json").write_text(json.dumps(content))
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"))
    assert code == 1 and message in last, last


@OWN_HANDLING
def test_an_empty_training_split_is_one_line(shapes_records, tmp_path, capsys):
    data = damaged_copy(shapes_records, tmp_path)
    for f in data.glob("train-*"):
        f.unlink()
    empty = data / "train-00000-of-00001"
    empty.write_bytes(b"")
    tfrecord_index.write_index(str(empty), str(data / "idx" / f"{empty.name}.idx"))
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--data_dir", str(data),
                       "--results_dir", str(tmp_path / "r"))
    assert code == 1 and "the training split is empty or smaller than one batch" in last, last


# --- outputs are checked before the work that fills them -----------------------------------
@OWN_HANDLING
@pytest.mark.parametrize("kind", ["file", "read-only"])
def test_an_unusable_export_dir_is_refused_before_training(tmp_path, capsys, kind):
    target = tmp_path / "export"
    if kind == "file":
        target.write_text("")
        context = None
    else:
        context = tmpfs(target, 64, read_only=True)
        context.__enter__()
    try:
        code, last = _main(capsys, "--mode", "train", "--num_iter", "2", "--export_dir",
                           str(target), "--results_dir", str(tmp_path / "r"))
    finally:
        if context:
            context.__exit__(None, None, None)
    assert code == 1 and last.startswith(f"main.py: error: --export_dir {target} is "), last
    assert trained_steps(tmp_path / "r") == 0


def _trained(shapes_records, tmp_path, capsys):
    """(results_dir of a one-step run, an empty folder for images, the validation images)."""
    out = tmp_path / "r"
    code, _ = _main(capsys, "--mode", "train", "--num_iter", "1", "--results_dir", str(out),
                    "--data_dir", shapes_records)
    assert code == 0
    images = tmp_path / "images"
    images.mkdir()
    return out, images, sorted((Path(shapes_records).parent / "coco" / "val2017").iterdir())


@OWN_HANDLING
def test_predict_draws_each_input_once_and_skips_an_unreadable_file(shapes_records, tmp_path,
                                                                    capsys):
    out, images, source = _trained(shapes_records, tmp_path, capsys)
    shutil.copy(source[0], images / "a.jpg")
    tf.io.write_file(str(images / "a.png"), tf.io.encode_png(tf.io.decode_jpeg(
        tf.io.read_file(str(source[1])))))
    (images / "b.jpg").write_bytes(b"not an image")
    from common import runner
    code = runner.main(SSDTask, ["main.py", *TINY, "--mode", "predict", "--to_predict",
                                 str(images), "--results_dir", str(out), "--data_dir",
                                 shapes_records])
    assert code == 0
    # One line a file, the unreadable one's saying why it was skipped.
    said = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[")]
    assert [ln.split()[0] for ln in said] == ["[1/3]", "[2/3]", "[3/3]"]
    assert said[2].startswith(f"[3/3] skipped {images / 'b.jpg'}: ")
    records = json.loads((out / "predictions.json").read_text())
    assert [os.path.basename(r["file"]) for r in records] == ["a.jpg", "a.png", "b.jpg"]
    assert sorted(os.listdir(out / "predictions")) == ["a.jpg.png", "a.png.png"]
    assert "error" in records[2] and "b.jpg is not an image" in records[2]["error"]
    assert not any(f.startswith("predictions.json.tmp") for f in os.listdir(out))


# --- flags the validators used to miss ------------------------------------------------------
@OWN_HANDLING
@pytest.mark.parametrize("task", ["ssd", "resnet"])
def test_train_and_evaluate_without_data_is_one_line_naming_the_flag(tmp_path, capsys, task):
    """It said "no validation-NNNNN-of-NNNNN TFRecord files in None"."""
    from rn50.task import ResNetTask
    cls, prepare = ((SSDTask, "ssd320/prepare_dataset.py") if task == "ssd"
                    else (ResNetTask, "resnet50v1.5/prepare_dataset.py"))
    code = runner.main(cls, ["main.py", "--mode", "train_and_evaluate", "--arch", "resnet_tiny",
                             "--results_dir", str(tmp_path)])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "main.py: error: --mode train_and_evaluate evaluates on --data_dir's validation split: "
        f"give --data_dir (prepared by {prepare}), or --mode train on synthetic data")


# `make test-slow` (the suite's time budget): a checkpoint of another model is
# test_checkpoint_faults'.
@pytest.mark.slow
def test_a_backbone_checkpoint_of_another_resnet_is_one_line(tmp_path, capsys):
    from rn50.task import ResNetTask
    rn = tmp_path / "rn"
    runner.run(ResNetTask, ["main.py", *PRESET_TINY, "--batch_size", "2", "--mode", "train",
                            "--iter_unit", "batch", "--num_iter", "1", "--results_dir", str(rn)])
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--arch", "resnet50",
                       "--trunk", "resnet_v1.5", "--image_size", "64", "--batch_size", "1",
                       "--backbone_checkpoint",
                       str(rn / "checkpoints"), "--results_dir", str(tmp_path / "r"))
    assert code == 1 and last.startswith("main.py: error: --backbone_checkpoint ")
    assert "does not fit --arch resnet50" in last, last
    # Through main.py: the error is the last line, not followed by TensorFlow's warnings about
    # the values the failed restore left (it printed about 100 of them).
    proc = run_cli([sys.executable, os.path.join(ROOT, "ssd320", "main.py"), "--mode", "train",
                    "--num_iter", "1", "--arch", "resnet50", "--trunk", "resnet_v1.5",
                    "--image_size", "64", "--batch_size", "1", "--backbone_checkpoint",
                    str(rn / "checkpoints"), "--results_dir", str(tmp_path / "r2")])
    assert proc.returncode == 1 and "could not be found" not in proc.stderr
    assert stderr_last_line(proc).startswith("main.py: error: --backbone_checkpoint ")
    # The default trunk, TF-slim's, says what the checkpoint is and which flag takes it.
    code, last = _main(capsys, "--mode", "train", "--num_iter", "1", "--arch", "resnet_tiny",
                       "--image_size", "64", "--batch_size", "1", "--backbone_checkpoint",
                       str(rn / "checkpoints"), "--results_dir", str(tmp_path / "r3"))
    assert code == 1 and last.endswith("holds no TF-slim resnet_v1 (no .../resnet_v1_50/conv1/"
                                       "weights) (a checkpoint of this repository's ResNet-50 "
                                       "v1.5: add --trunk resnet_v1.5)"), last


@OWN_FILES_ONLY
# `make test-slow` (the suite's time budget): a full disk during a save is test_checkpoint_faults'.
@pytest.mark.slow
def test_predict_onto_a_filling_disk_leaves_no_empty_drawing(shapes_records, tmp_path, capsys):
    """Drawings are written whole or not at all: when the disk fills, the images that did not
    fit are reported and recorded with their error, and no zero-byte or cut PNG stays."""
    out, images, source = _trained(shapes_records, tmp_path, capsys)
    for i, src in enumerate(source):
        shutil.copy(src, images / f"{i}.jpg")
    with tmpfs(out / "predictions", 24):
        code, _ = _main(capsys, "--mode", "predict", "--to_predict", str(images),
                        "--results_dir", str(out), "--data_dir", shapes_records)
        drawn = sorted(os.listdir(out / "predictions"))
        for name in drawn:
            with open(out / "predictions" / name, "rb") as f:
                data = f.read()
            assert data.startswith(b"\x89PNG") and data.endswith(b"IEND\xaeB`\x82"), name
    records = json.loads((out / "predictions.json").read_text())
    failed = [r for r in records if "error" in r]
    assert code == 0 and failed and len(drawn) == len(records) - len(failed)
    assert all("cannot write" in r["error"] for r in failed)


@OWN_FILES_ONLY
# The SavedModel's case in the suite; with ONNX (the same check, a larger need): `make
# test-slow`.
@pytest.mark.parametrize("onnx", [False, pytest.param(True, marks=pytest.mark.slow)],
                         ids=["savedmodel", "with-onnx"])
def test_an_export_dir_too_small_for_the_real_export_is_refused_before_training(
        tmp_path, capsys, onnx):
    """The room an export needs is measured by a trial export of the model at start (its graph
    is 1.6 MB where its variables are a few hundred kB; ONNX adds as much again): a disk that
    cannot hold it stops the run before step 1, and nothing is left in it."""
    disk = tmp_path / "disk"
    with tmpfs(disk, 2600):
        code, last = _main(capsys, "--mode", "train", "--num_iter", "2", "--export_dir",
                           str(disk / "exp"), "--results_dir", str(tmp_path / "r"),
                           *(["--export_onnx"] if onnx else []))
        left = os.listdir(disk / "exp") if (disk / "exp").exists() else []
    assert code == 1 and last.startswith(f"main.py: error: --export_dir {disk / 'exp'} "), last
    assert "the export needs about" in last or "cannot hold the export" in last, last
    assert trained_steps(tmp_path / "r") == 0 and left == []


@pytest.mark.one_stack("pip", "the swap is the file system's, the same for both stacks")
# `make test-slow` (the suite's time budget): the export's swap and what a stop in it leaves are
# test_export_swap's.
@pytest.mark.slow
def test_a_failed_export_leaves_the_previous_one_whole(tmp_path, capsys, monkeypatch):
    """Every export is written in a staging directory and swapped in whole: an ONNX conversion
    that fails half-way (here: a file cut short, then an error) leaves the earlier export as it
    was, and no part of the new one."""
    from common.errors import TrainingError
    from common.export import onnx_convert
    target = tmp_path / "exp"
    args = ["--mode", "train", "--num_iter", "1", "--export_dir", str(target),
            "--results_dir", str(tmp_path / "r")]
    code, _ = _main(capsys, *args)
    assert code == 0
    before = digests(target)
    assert any(name.endswith("saved_model.pb") for name in before)

    def fails_half_way(module, export_dir):
        with open(os.path.join(export_dir, "model.onnx"), "wb") as f:
            f.write(b"\x08\x07" * 100)  # a cut file, as a full disk leaves
        raise TrainingError("tf2onnx could not convert (a stand-in failure)")
    monkeypatch.setattr(onnx_convert, "export_module", fails_half_way)
    code, last = _main(capsys, *[a if a != "1" else "2" for a in args], "--export_onnx")
    assert code == 1 and "tf2onnx could not convert" in last
    assert digests(target) == before  # the earlier export, whole
    assert not [n for n in os.listdir(target) if n.startswith(".staging-")]
