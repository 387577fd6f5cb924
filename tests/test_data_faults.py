"""Bad data is refused, never half-used (hardening, part 3), and bad flags stop at once (part 4).

Records and images here are the real digits (``digits_records``), damaged on purpose.
"""
import glob
import io
import os
import shutil
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import OWN_HANDLING, RN50, TINY, run_cli, stderr_last_line
from reliability_helpers import digests, tmpfs

from common import runner
from common.data import tfrecord_index
from rn50 import dali_pipeline, digits, eval_preprocessing, prepare, tfdata_pipeline
from rn50.task import ResNetTask

MAIN = os.path.join(RN50, "main.py")
PREPARE = os.path.join(RN50, "prepare_dataset.py")


def _jpegs(n=8):
    """n real digit JPEGs, from the records the session fixture prepared."""
    files = tfrecord_index.shard_files(_jpegs.records, "train", "test")
    out = []
    for raw in tf.data.TFRecordDataset(files).take(n):
        ex = tf.io.parse_single_example(
            raw, {"image/encoded": tf.io.FixedLenFeature([], tf.string)})
        out.append(ex["image/encoded"].numpy())
    return out


@pytest.fixture(autouse=True)
def _records(digits_records):
    _jpegs.records = digits_records


def _write(path, images, labels):
    with tf.io.TFRecordWriter(str(path)) as w:
        for image, label in zip(images, labels):
            w.write(prepare._example(image, int(label), "c"))


def _dataset(tmp_path, train, val=None):
    """A data_dir with one train and one validation shard: [(image bytes, label)]."""
    data = tmp_path / "data"
    data.mkdir()
    _write(data / "train-00000-of-00001", *zip(*train))
    _write(data / "validation-00000-of-00001", *zip(*(val or train)))
    return data


def _run(data, tmp_path, *extra):
    return run_cli([sys.executable, MAIN, "--mode", "train", *TINY, "--batch_size", "4",
                    "--data_dir", str(data), "--results_dir", str(tmp_path / "r"), *extra])


@OWN_HANDLING
@pytest.mark.parametrize("dali", [False, True])
def test_label_out_of_range_names_the_file_and_record(tmp_path, dali):
    images = _jpegs(8)
    labels = [1, 2, 3, 11, 5, 6, 7, 8]  # --num_classes 10: labels are 1..10
    data = _dataset(tmp_path, list(zip(images, labels)))
    proc = _run(data, tmp_path, *(["--dali"] if dali else []))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert stderr_last_line(proc) == (f"main.py: error: cannot read the input data: "
                                      f"{data}/train-00000-of-00001, record 3: label 11 is "
                                      "outside 1..10")


@pytest.mark.parametrize("dali", [False, True])
def test_corrupt_image_names_the_file_and_gives_the_reason(tmp_path, dali):
    images = _jpegs(8)
    images[5] = images[5][:len(images[5]) // 2]  # a valid JPEG header, cut short
    data = _dataset(tmp_path, list(zip(images, range(1, 9))))
    proc = _run(data, tmp_path, *(["--dali"] if dali else []))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = stderr_last_line(proc)
    assert last.startswith(f"main.py: error: cannot read the input data: "
                           f"{data}/train-00000-of-00001, record 5: ")
    assert "JPEG" in last and not last.endswith(":")


@OWN_HANDLING
def test_a_corrupt_calibration_image_is_named_before_training(tmp_path):
    """--export_onnx_int8 calibrates on training images after the training: a record it
    cannot read was blamed on writing the export ("cannot write the export ... (corrupted
    record at 12)"), after the whole run. It is named, file and record, before training."""
    images = _jpegs(8)
    images[6] = images[6][:len(images[6]) // 2]
    data = _dataset(tmp_path, list(zip(images, range(1, 9))), val=list(zip(_jpegs(4),
                                                                           range(1, 5))))
    proc = _run(data, tmp_path, "--export_dir", str(tmp_path / "export"), "--export_onnx_int8",
                "--calibration_images", "8")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = stderr_last_line(proc)
    assert last.startswith(f"main.py: error: --export_onnx_int8: a calibration image cannot be "
                           f"read ({data}/train-00000-of-00001, record 6: "), last
    assert "step 1" not in proc.stdout  # nothing trained


@pytest.mark.parametrize("fault", ["empty", "garbage", "truncated", "stale"])
def test_bad_dali_index_is_rebuilt_and_the_epoch_has_its_full_length(tmp_path, digits_records,
                                                                    capsys, fault):
    data = tmp_path / "data"
    shutil.copytree(digits_records, data)
    idx = data / "idx" / "train-00000-of-00003.idx"
    lines = idx.read_text().splitlines(keepends=True)
    if fault == "empty":
        idx.write_text("")
    elif fault == "garbage":
        idx.write_bytes(b"\x89PNG not an index\n")
    elif fault == "truncated":
        idx.write_text("".join(lines[:len(lines) // 2]))
    else:  # the index of another shard: offsets that do not fit this file
        idx.write_text((data / "idx" / "train-00001-of-00003.idx").read_text() + lines[-1])
    s = runner.run(ResNetTask, ["main.py", "--mode", "train", *TINY, "--dali", "--data_dir",
                                str(data), "--num_iter", "1", "--results_dir", str(tmp_path / "r")])
    assert s["final_step"] == 6  # 48 images / batch 8: no shard half-read
    out = capsys.readouterr().out
    assert f"dali: rebuilt train-00000-of-00003.idx in {data}/idx: it was " in out
    assert tfrecord_index.read_index(str(idx)) == tfrecord_index.scan(
        str(data / "train-00000-of-00003"))


@OWN_HANDLING
def test_bad_dali_index_that_cannot_be_rebuilt_stops_with_one_line(tmp_path, digits_records):
    data = tmp_path / "data"
    shutil.copytree(digits_records, data)
    idx_dir = tmp_path / "idx"
    with tmpfs(idx_dir, 64):
        for f in os.listdir(data / "idx"):
            shutil.copy(data / "idx" / f, idx_dir / f)
        (idx_dir / "train-00001-of-00003.idx").write_text("")
        subprocess_ro = run_cli(["mount", "-o", "remount,ro", str(idx_dir)])
        assert subprocess_ro.returncode == 0, subprocess_ro.stderr
        proc = _run(data, tmp_path, "--dali", "--data_idx_dir", str(idx_dir))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert stderr_last_line(proc) == (
        f"main.py: error: --dali needs index files in {idx_dir} and they cannot be written "
        "(Read-only file system); make them with prepare_dataset.py or set --data_idx_dir")


def _png(jpeg: bytes) -> bytes:
    from PIL import Image
    out = io.BytesIO()
    Image.open(io.BytesIO(jpeg)).convert("RGB").save(out, format="PNG")
    return out.getvalue()


@pytest.mark.both_stacks
def test_png_records_work_alike_in_both_pipelines(tmp_path):
    pngs = [_png(j) for j in _jpegs(16)]
    data = _dataset(tmp_path, [(p, 1 + i % 10) for i, p in enumerate(pngs)])
    tfrecord_index.write_index(str(data / "validation-00000-of-00001"),
                               str(tmp_path / "validation.idx"))
    os.makedirs(data / "idx")
    shutil.move(tmp_path / "validation.idx", data / "idx" / "validation-00000-of-00001.idx")
    files = tfrecord_index.shard_files(str(data), "validation", "test")
    nvidia = eval_preprocessing.nvidia(32)
    a_img, a_lab = next(iter(tfdata_pipeline.dataset(files, 8, 32, training=False, num_classes=10,
                                                     prep=nvidia)))
    b_img, b_lab = next(iter(dali_pipeline.dataset(files, str(data / "idx"), 8, 32,
                                                   training=False, prep=nvidia)))
    np.testing.assert_array_equal(a_lab.numpy(), b_lab.numpy())
    assert np.abs(a_img.numpy() - b_img.numpy()).mean() < 0.05  # lossless: resize kernels only
    for dali in (False, True):
        s = runner.run(ResNetTask, ["main.py", "--mode", "train_and_evaluate", *TINY,
                                    "--data_dir", str(data), "--num_iter", "1",
                                    "--results_dir", str(tmp_path / f"r{dali}")]
                       + (["--dali"] if dali else []))
        assert s["final_step"] == 2 and s["eval_images"] == 16


def _folder(tmp_path, n=12):
    src = tmp_path / "src"
    digits.export(str(src), size=32, limit=n)
    return src


@OWN_HANDLING
def test_prepare_refuses_a_truncated_jpeg_naming_it_and_leaves_no_shard(tmp_path):
    src = _folder(tmp_path)
    victim = sorted(glob.glob(str(src / "train" / "*" / "*.JPEG")))[3]
    data = open(victim, "rb").read()
    open(victim, "wb").write(data[:len(data) // 2])  # header intact, scan data cut
    out = tmp_path / "out"
    proc = run_cli([sys.executable, PREPARE, str(src), str(out), "--train_shards", "1",
                    "--val_shards", "1"])
    assert proc.returncode == 1
    assert stderr_last_line(proc).startswith(f"prepare_dataset.py: error: {victim} is not a "
                                             "readable image (")
    assert not [f for f in os.listdir(out) if f.startswith(("train-", "validation-"))]


@OWN_HANDLING
def test_prepare_again_removes_stale_shards_and_the_loader_refuses_mixed_sets(tmp_path):
    src, out = _folder(tmp_path), tmp_path / "out"
    prepare.prepare(str(src), str(out), 3, 1, log=lambda *_: None)
    (out / "train-00001-of-00003.tmp").write_bytes(b"left by a killed run")
    prepare.prepare(str(src), str(out), 2, 1, log=lambda *_: None)
    assert sorted(f for f in os.listdir(out) if f.startswith("train-")) == \
        ["train-00000-of-00002", "train-00001-of-00002"]
    assert sorted(os.listdir(out / "idx")) == ["train-00000-of-00002.idx",
                                               "train-00001-of-00002.idx",
                                               "validation-00000-of-00001.idx"]
    before = digests(out)
    # A stale shard of another set copied in by hand is refused, not trained on.
    shutil.copy(out / "train-00000-of-00002", out / "train-00003-of-00004")
    classes = len((out / "labels.txt").read_text().split())
    proc = _run(out, tmp_path, "--num_classes", str(classes))
    assert proc.returncode == 1
    assert stderr_last_line(proc) == (
        f"main.py: error: {out} holds train shards of 2 different sets (-of-00002, -of-00004): "
        "remove the stale ones or prepare the data again")
    os.remove(out / "train-00003-of-00004")
    assert digests(out) == before  # nothing else touched


@OWN_HANDLING
@pytest.mark.parametrize("flag, value, message", [
    ("--momentum", "1.5", "flag --momentum=1.5: --momentum must be in [0, 1)"),
    ("--momentum", "-0.1", "flag --momentum=-0.1: --momentum must be in [0, 1)"),
    ("--lr_init", "0", "flag --lr_init=0.0: --lr_init must be greater than 0"),
    ("--lr_init", "-0.1", "flag --lr_init=-0.1: --lr_init must be greater than 0"),
    ("--image_size", "100000", "flag --image_size=100000: 100000 is not an integer in the "
                               "range [32, 2048]"),
])
def test_bad_hyperparameters_stop_with_one_line(tmp_path, capsys, flag, value, message):
    code = runner.main(ResNetTask, ["main.py", "--mode", "train", "--results_dir", str(tmp_path),
                                    flag, value])
    assert code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"main.py: error: {message}"
    assert not os.listdir(tmp_path)  # stopped before anything was written


# The message DALIDataset raised on this machine (DALI 2.4.0) for a truncated JPEG, abridged.
DALI_MESSAGE = """Error DALI_ERROR_INVALID_OPERATION:
Critical error in pipeline:
Error in CPU operator `nvidia.dali.fn.decoders.image_random_crop`,
which was used in the pipeline definition with the following traceback:

  File "/work/main/resnet50v1.5/rn50/dali_pipeline.py", line 56, in pipeline
    images = fn.decoders.image_random_crop(

encountered:

nvImageCodec failure: '#3'
Current pipeline object is no longer valid.
while executing: daliPipelinePopOutputs(pipeline_handle_, &outputs_h)
"""


def test_the_reason_is_pulled_out_of_dali_and_tensorflow_messages():
    from common.data.input_errors import reason
    assert reason(DALI_MESSAGE) == "DALI fn.decoders.image_random_crop: nvImageCodec failure: '#3'"
    tf_message = ("{{function_node __wrapped__IteratorGetNext_output_types_2_device_/job:localhost"
                  "/replica:0/task:0/device:CPU:0}} assertion failed: [label 11 is outside 1..10]"
                  "\n\t [[{{node Assert/Assert}}]] [Op:IteratorGetNext] name: ")
    assert reason(tf_message) == "label 11 is outside 1..10"
    # A function's error raised in eager code: its cause after the graph execution preamble and
    # the traceback (the first line was "Graph execution error:").
    eager = ("Graph execution error:\n\nDetected at node sub_1 defined at (most recent call "
             "last):\n  File \"step.py\", line 3, in step\n    y = x - t\n"
             "Incompatible shapes: [3] vs. [2]\n\t [[{{node sub_1}}]] [Op:__inference_step_9]")
    assert reason(eager) == "Incompatible shapes: [3] vs. [2]"


def test_checked_range_accepts_no_values_and_reports_the_first_bad_one():
    from common.data.input_errors import checked_range, reason
    assert checked_range(tf.zeros([0], tf.int32), 1, 7, "class").shape == (0,)
    np.testing.assert_array_equal(checked_range([1, 7], 1, 7, "class"), [1, 7])
    ds = tf.data.Dataset.from_tensors([3, 0, 9]).map(lambda v: checked_range(v, 1, 7, "class"))
    with pytest.raises(tf.errors.InvalidArgumentError) as e:  # as in a pipeline: a graph
        next(iter(ds))
    assert reason(e.value.message) == "class 0 is outside 1..7"


@pytest.mark.parametrize("kind", ["png16 grey", "png16 rgb", "tiff32 grey"])
def test_16_bit_images_are_prepared_as_tensorflow_decodes_them(tmp_path, kind):
    """Scaled to 8 bits (value / 257), not clipped to white as PIL's convert('RGB') did."""
    from PIL import Image

    from common.data.images import jpeg_bytes
    ramp = (np.arange(32 * 32).reshape(32, 32) * 60).astype(np.uint16)  # 0 .. 61,380
    if kind == "tiff32 grey":  # TensorFlow cannot decode TIFF: the PIL path
        path = tmp_path / "x.tif"
        Image.fromarray(ramp.astype(np.int32), mode="I").save(path)
        want = np.repeat((ramp / 257)[..., None], 3, -1)
    else:
        pixels = ramp[..., None] if kind == "png16 grey" else np.stack([ramp, ramp // 2,
                                                                         ramp // 4], -1)
        path = tmp_path / "x.png"
        path.write_bytes(tf.io.encode_png(tf.constant(pixels)).numpy())
        want = np.broadcast_to(pixels / 257, (32, 32, 3))
    got = tf.io.decode_jpeg(jpeg_bytes(str(path))).numpy().astype(float)
    assert np.abs(got - want).mean() < 3 and got.max() < 250


def test_the_device_range_check_counts_in_the_step_and_stops_at_the_sync_point():
    """DALI's batches stay on the GPU, so their labels are checked inside the compiled step and
    read by the host at its next sync point; masked values (SSD's padding) are not checked."""
    from common.data.input_errors import DeviceRangeCheck
    from common.errors import DataError
    check = DeviceRangeCheck("label", 1, 10, shift=1)  # 0-based values, named 1-based
    step = tf.function(lambda v, valid=None: check(v, valid))
    step(tf.constant([0, 9, 3], tf.int32))
    check.raise_if_bad()  # nothing out of range
    step(tf.constant([0, 10, 12], tf.int32), tf.constant([True, True, False]))
    with pytest.raises(DataError, match=r"^cannot read the input data: label 11 is outside "
                                        r"1\.\.10$"):
        check.raise_if_bad()
    with pytest.raises(DataError, match=r"^cannot read the input data: f, record 2: why$"):
        check.raise_if_bad(lambda: "f, record 2: why")
