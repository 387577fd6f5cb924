"""SSD320 v1.2: exact size, dtypes, pipelines, COCO evaluation, backbone loading, export, and
every mode end to end on a tiny generated COCO-layout dataset."""
import json
import os
import pathlib
import shutil
import sys

import dle_logs
import numpy as np
import pytest
import tensorflow as tf
from conftest import ROOT, TINY, dtype_policy, run_cli

from common import runner
from common.data import tfrecord_index
from common.runtime import devices, dllogger
from ssd import anchors, coco_eval, dali_pipeline, shapes, targets, tfdata_pipeline
from ssd.model import build_ssd, part_of
from ssd.task import SSDTask

MAIN = os.path.join(ROOT, "ssd320", "main.py")


def _count(variables):
    return int(sum(np.prod(v.shape) for v in variables))


def test_parameter_count_and_structure_of_the_full_model():
    model = build_ssd("resnet50", num_classes=90, image_size=320)
    trunk = 25_557_032 - (2048 * 1000 + 1000)  # ResNet-50 v1.5 without its classifier
    conv3 = 3 * 3 * 256 * 256
    fpn = (512 + 1024 + 2048 + 3) * 256 + 4 * (conv3 + 2 * 256)  # laterals; P3/P4 smooth, P6, P7
    towers = 2 * 4 * conv3 + 2 * 4 * 5 * 2 * 256  # shared convs; a batch norm per level
    heads = (3 * 3 * 256 * 24 + 24) + (3 * 3 * 256 * 6 * 91 + 6 * 91)
    assert _count(model.trainable_variables) == trunk + fpn + towers + heads == 32_840_570
    out = model(np.zeros((1, 320, 320, 3), np.float32), training=False)
    assert out["cls_logits"].shape == (1, 12_804, 91) and out["box_codes"].shape == (1, 12_804, 4)
    assert len(anchors.generate(320)) == 12_804
    bias = model.get_layer("class_head").bias.numpy()
    np.testing.assert_allclose(bias, -np.log(0.99 / 0.01), rtol=1e-6)
    assert [model.get_layer(f"class_tower{i}_p3_bn").momentum for i in range(4)] == [0.997] * 4


@pytest.mark.parametrize("policy, compute", [("float32", "float32"),
                                             ("mixed_float16", "float16"),
                                             ("mixed_bfloat16", "bfloat16")])
def test_outputs_are_float32_under_each_policy(policy, compute):
    with dtype_policy(policy):
        model = build_ssd("resnet_tiny", num_classes=3, image_size=64)
        out = model(np.random.rand(2, 64, 64, 3).astype("float32"), training=False)
        assert out["cls_logits"].dtype == tf.float32 and out["box_codes"].dtype == tf.float32
        conv = model.get_layer("box_tower_conv0")
        assert conv.compute_dtype == compute and conv.kernel.dtype == "float32"


def test_the_fpn_computes_in_float32_under_bfloat16_only():
    """SSD320 trained slower under bfloat16 with its feature pyramid in bfloat16
    (devices.Capabilities.float32_fpn); float16 keeps it on tensor cores."""
    assert devices.Capabilities(devices.CPU_ONLY, "bfloat16").float32_fpn
    assert not devices.Capabilities(devices.Devices(0, "GPU", 1), "float16").float32_fpn
    assert not devices.Capabilities(devices.CPU_ONLY, "float32").float32_fpn
    with dtype_policy("mixed_bfloat16"):
        model = build_ssd("resnet_tiny", num_classes=3, image_size=64, float32_parts=("fpn",))
        fpn = [layer for layer in model.layers if layer.name.startswith("fpn_")]
        assert len(fpn) == 19 and {layer.compute_dtype for layer in fpn} == {"float32"}
        for name in ("class_tower_conv0", "class_head", "block4_unit_1_conv3"):
            assert model.get_layer(name).compute_dtype == "bfloat16"
        out = model(np.random.RandomState(0).rand(2, 64, 64, 3).astype("float32"))
        assert out["cls_logits"].dtype == tf.float32


# Which layers each part of --float32_parts holds (ssd/model.py), by name.
_PART_OF = {"trunk": lambda n: n.startswith(("conv1", "pool1", "block")),
            "fpn": lambda n: n.startswith("fpn_"),
            "towers": lambda n: "_tower" in n,
            "heads": lambda n: n.endswith("_head") or n[:-1].endswith(("class_p", "box_p"))}


@pytest.mark.parametrize("parts", [(), ("heads",), ("towers", "heads"), ("trunk", "fpn")])
def test_float32_parts_compute_in_float32_and_the_rest_in_bfloat16(parts):
    """--float32_parts under AMP: each named part's layers compute in float32 (their inputs
    cast up), every other layer in bfloat16 (the outputs' concatenations are float32 always);
    the weights are float32 whichever, so a checkpoint fits every choice."""
    with dtype_policy("mixed_bfloat16"):
        model = build_ssd("resnet_tiny", num_classes=3, image_size=64, float32_parts=parts)
        named = {part: [layer for layer in model.layers if test(layer.name)]
                 for part, test in _PART_OF.items()}
        assert all(named.values()) and len(named["heads"]) == 12  # 2 heads, 2 x 5 reshapes
        for part, found in named.items():
            want = "float32" if part in parts else "bfloat16"
            assert {layer.compute_dtype for layer in found} == {want}, part
            assert {part_of(layer.name) for layer in found} == {part}  # model.part_of agrees
        assert sum(map(len, named.values())) == len(model.layers) - 3  # input, class, box
        assert {w.dtype for w in model.weights} == {"float32"}
        out = model(np.random.RandomState(0).rand(2, 64, 64, 3).astype("float32"))
        assert out["cls_logits"].dtype == tf.float32
    with pytest.raises(ValueError, match="float32_parts must be among"):
        build_ssd("resnet_tiny", num_classes=3, image_size=64, float32_parts=("loss",))


def test_dali_and_tfdata_agree_on_evaluation_inputs_and_targets(shapes_records):
    """DALI's batches carry the padded boxes, encoded in the step for the whole batch: the same
    targets as the tf.data pipeline encodes for each image."""
    files = tfrecord_index.shard_files(shapes_records, "validation", "test")
    anc = anchors.generate(128)
    a = next(iter(tfdata_pipeline.dataset(files, 8, 128, False, anc, 7)))
    b = next(iter(dali_pipeline.dataset(files, os.path.join(shapes_records, "idx"), 8, 128,
                                        False)))
    for key in ("image_id", "height", "width"):
        np.testing.assert_array_equal(a[key].numpy(), b[key].numpy())
    yx = tf.gather(b["boxes_ltrb"], [1, 0, 3, 2], axis=-1)
    cls, box = targets.encode_targets(yx, b["classes"], b["count"], tf.constant(anc))
    np.testing.assert_array_equal(a["cls"].numpy(), cls.numpy())
    assert (a["cls"].numpy() > 0).sum() > 8  # the images have matched anchors
    np.testing.assert_allclose(a["box"].numpy(), box.numpy(), atol=1e-5)
    diff = np.abs(a["images"].numpy() - b["images"].numpy())
    assert diff.mean() < 0.05 and np.percentile(diff, 99) < 0.3, diff.mean()


def test_training_targets_keep_boxes_consistent_with_the_crop_and_flip(shapes_records):
    files = tfrecord_index.shard_files(shapes_records, "train", "test")
    anc = anchors.generate(128)
    ds = tfdata_pipeline.dataset(files, 4, 128, True, anc, 7, seed=0)
    for batch in ds.take(3):
        cls, codes = batch["cls"].numpy(), batch["box"].numpy()
        assert (cls > 0).any() and np.isfinite(codes).all()
        assert not codes[cls == 0].any()  # codes only where an anchor is matched


def test_seeded_training_data_repeat_exactly_and_other_seeds_differ(shapes_records):
    """One --seed, one stream: order, flips and crops (stateless ops keyed by each element)."""
    files = tfrecord_index.shard_files(shapes_records, "train", "test")
    anc = anchors.generate(64)

    def first_batches(seed):
        ds = tfdata_pipeline.dataset(files, 4, 64, True, anc, 7, seed=seed)
        return [{k: b[k].numpy() for k in ("images", "cls", "box", "image_id")}
                for b in ds.take(4)]
    a, b, c = first_batches(5), first_batches(5), first_batches(6)
    for x, y in zip(a, b):
        for key in x:
            np.testing.assert_array_equal(x[key], y[key])
    assert any(not np.array_equal(x["images"], z["images"]) for x, z in zip(a, c))


def test_coco_evaluation_equals_pycocotools_run_directly(shapes_records):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval
    gt_path = os.path.join(shapes_records, "validation_annotations.json")
    with open(gt_path) as f:
        gt = json.load(f)
    rng = np.random.default_rng(0)
    dets = [{"image_id": a["image_id"], "category_id": a["category_id"],
             "bbox": [v + rng.normal(0, 2) for v in a["bbox"]], "score": float(rng.uniform())}
            for a in gt["annotations"]]
    dets += [{"image_id": gt["images"][0]["id"], "category_id": 1, "bbox": [1, 1, 20, 20],
              "score": 0.9}]  # a false positive
    ours = coco_eval.evaluate(coco_eval.ground_truth(gt_path), dets,
                              [im["id"] for im in gt["images"]])
    coco = COCO(gt_path)
    ev = COCOeval(coco, coco.loadRes(dets), "bbox")
    ev.evaluate(), ev.accumulate(), ev.summarize()
    assert [ours[k] for k in coco_eval.STATS] == [float(v) for v in ev.stats]
    assert 0.3 < ours["AP50"] <= 1


# Every mode with tf.data is ResNet-50's and Transformer-XL's in the suite, SSD320's with DALI
# (its tf.data pipeline in the other tests here); SSD320's with tf.data: `make test-slow`.
@pytest.mark.parametrize("dali", [pytest.param(False, marks=pytest.mark.slow),
                                  pytest.param(True, marks=pytest.mark.both_stacks)])
def test_every_mode_end_to_end(tmp_path, shapes_records, dali):
    out = str(tmp_path)
    base = ["main.py", *TINY, "--data_dir", shapes_records, "--results_dir", out]
    if dali:
        base.append("--dali")
    s = runner.run(SSDTask, base + ["--mode", "train_and_evaluate", "--iter_unit", "epoch",
                                    "--num_iter", "1"])
    assert s["final_step"] == 6 and s["eval_images"] == 8  # 24 images / batch 4
    # The log holds the classes label_map.json gave, not the flag's unset default.
    with open(os.path.join(shapes_records, "label_map.json")) as fh:
        classes = json.load(fh)["num_classes"]
    params = [r["data"] for r in dllogger.read_records(os.path.join(out, "log.json"))
              if r.get("step") == "PARAMETER"]
    assert params[0]["num_classes"] == classes and params[0]["steps_per_epoch"] == 6
    names = SSDTask.config.LOG_NAMES
    assert all(-1 <= s[names.metric(k)] <= 1 for k in coco_eval.STATS)
    ap = "DetectionBoxes_Precision/mAP"
    ev = runner.run(SSDTask, base + ["--mode", "evaluate"])
    assert ev[ap] == pytest.approx(s[ap]) and ev["eval_images"] == 8
    for mode, rate in (("training_benchmark", "train_throughput"),
                       ("inference_benchmark", "infer_throughput")):
        b = runner.run(SSDTask, base + ["--mode", mode, "--iter_unit", "batch", "--num_iter",
                                        "3", "--warmup_steps", "1"])
        assert b["timed_steps"] == 2 and b[rate] > 0
    # What a parser written for NVIDIA's logs finds in each of these runs (tests/dle_logs.py).
    assert dle_logs.check_log("ssd320", os.path.join(out, "log.json")) == [
        "train_and_evaluate", "evaluate", "training_benchmark", "inference_benchmark"]


@pytest.mark.both_stacks
def test_predict_draws_and_the_export_gives_the_same_detections(tmp_path, shapes_records):
    out = str(tmp_path)
    base = ["main.py", *TINY, "--data_dir", shapes_records, "--results_dir", out]
    runner.run(SSDTask, base + ["--mode", "train", "--iter_unit", "batch", "--num_iter", "2"])
    images = os.path.join(os.path.dirname(shapes_records), "coco", "val2017")
    s = runner.run(SSDTask, base + ["--mode", "predict", "--to_predict", images,
                                    "--score_threshold", "0", "--export_dir",
                                    str(tmp_path / "export")])
    assert s["predictions"] == 8
    with open(tmp_path / "predictions.json") as f:
        preds = json.load(f)
    assert all(os.path.exists(p["drawn"]) for p in preds)
    first = preds[0]
    assert len(first["boxes_ymin_xmin_ymax_xmax"]) == len(first["scores"]) == 100
    assert set(first["names"]) <= {c["name"] for c in shapes.CATEGORIES}
    served = tf.saved_model.load(str(tmp_path / "export")).signatures["serving_default"]
    det = served(images=tf.io.read_file(first["file"])[None])  # the file's bytes, as sent
    h, w = tf.io.decode_image(tf.io.read_file(first["file"])).shape[:2]
    np.testing.assert_allclose(det["detection_boxes"][0].numpy() * [h, w, h, w],
                               first["boxes_ymin_xmin_ymax_xmax"], atol=0.02)
    np.testing.assert_allclose(det["detection_scores"][0].numpy(), first["scores"], atol=1e-4)
    assert list(det["detection_classes"][0].numpy()) == first["classes"]


def test_backbone_checkpoint_of_resnet50v15_loads_into_the_trunk(tmp_path):
    from rn50.task import ResNetTask
    rn_dir = tmp_path / "rn"
    runner.run(ResNetTask, ["main.py", "--mode", "train", *TINY,
                            "--batch_size", "4", "--iter_unit", "batch", "--num_iter", "1",
                            "--results_dir", str(rn_dir)])
    reader = tf.train.load_checkpoint(str(rn_dir / "checkpoints" / "ckpt-1"))
    trainer = runner.setup(SSDTask, ["main.py", *TINY, "--mode", "train", "--trunk",
                                     "resnet_v1.5", "--backbone_checkpoint",
                                     str(rn_dir / "checkpoints"),
                                     "--results_dir", str(tmp_path / "ssd")])
    trainer.log.close()
    # Every trunk weight equals a tensor of the checkpoint (read here without our loader).
    values = {tuple(np.asarray(reader.get_tensor(n)).ravel()[:4])
              for n in reader.get_variable_to_shape_map() if "OPTIMIZER_SLOT" not in n}
    for name in ("stem_conv", "stage2_block1_2_conv", "stage4_block1_3_bn"):
        for w in trainer.model.get_layer(name).weights:
            assert tuple(np.asarray(w).ravel()[:4]) in values, (name, w.path)


@pytest.mark.one_stack("pip", "what two ranks agree on is this repository's code over Horovod, "
                        "whose allreduce tests/test_horovod.py runs on both stacks")
@pytest.mark.skipif(shutil.which("mpirun") is None, reason="MPI is not installed")
def test_two_process_evaluation_gives_the_same_ap_as_one(tmp_path, shapes_records):
    out = str(tmp_path / "r")
    base = [*TINY, "--data_dir", shapes_records, "--results_dir", out]
    runner.run(SSDTask, ["main.py", *base, "--mode", "train", "--iter_unit", "batch",
                         "--num_iter", "3"])
    one = runner.run(SSDTask, ["main.py", *base, "--mode", "evaluate"])
    proc = run_cli(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                    sys.executable, MAIN, *base, "--mode", "evaluate", "--log_filename",
                    "two.json"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    from common.runtime.dllogger import read_records
    two = [r for r in read_records(os.path.join(out, "two.json")) if r.get("step") == []][-1]
    assert two["data"]["world_size"] == 2 and two["data"]["eval_images"] == 8
    for k in map(SSDTask.config.LOG_NAMES.metric, coco_eval.STATS):
        assert two["data"][k] == pytest.approx(one[k], abs=1e-6), k


def test_image_size_must_be_a_multiple_of_32(capsys):
    assert runner.main(SSDTask, ["main.py", "--image_size", "300"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        "main.py: error: flag --image_size=300: --image_size must be a multiple of 32"


def test_float32_parts_outside_the_networks_parts_are_one_line(capsys):
    assert runner.main(SSDTask, ["main.py", "--float32_parts", "heads,loss"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "main.py: error: flag --float32_parts=['heads', 'loss']: --float32_parts takes any of "
        "trunk, fpn, towers, heads")


def test_float32_parts_without_amp_is_one_line(tmp_path, capsys):
    """It was taken with no note: without AMP every part is float32 already."""
    assert runner.main(SSDTask, ["main.py", *TINY, "--float32_parts", "fpn", "--mode",
                                 "training_benchmark", "--iter_unit", "batch", "--num_iter", "2",
                                 "--warmup_steps", "1", "--results_dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "main.py: error: --float32_parts chooses what AMP keeps in float32; without --amp (or "
        "TF_ENABLE_AUTO_MIXED_PRECISION=1) the whole network is float32")


# `make test-slow` (the suite's time budget): each precision's losses are test_reference_outputs'.
@pytest.mark.slow
def test_precision_error_measures_each_precision_against_float32(tmp_path, shapes_records,
                                                                 digits_records, capsys,
                                                                 monkeypatch):
    """ssd320/scripts/precision_error.py: float32 against itself is the floor (0), bfloat16's
    8 significant bits are further from float32's gradients than float16's 11, in every part;
    what it cannot use (no checkpoint, an unreadable or incomplete settings record, another
    model's checkpoint, a cut checkpoint, cut records, another model's records) is one line
    and exit status 2."""
    from conftest import load_script
    script = load_script("ssd320", "precision_error")
    out = str(tmp_path / "run")
    runner.run(SSDTask, ["main.py", *TINY, "--image_size", "64", "--data_dir", shapes_records,
                         "--results_dir", out, "--mode", "train", "--iter_unit", "batch",
                         "--num_iter", "2"])  # 64 pixels: float16 is slow on a CPU
    argv = ["precision_error.py", "--checkpoint", os.path.join(out, "checkpoints"),
            "--data_dir", shapes_records, "--batches", "1", "--batch_size", "2"]
    monkeypatch.setattr("sys.argv", argv + ["--variants", "float32,bfloat16,float16"])
    script.main()
    rows = {ln.split(" | ")[0][2:]: ln.strip("| ").split(" | ")[1:]
            for ln in capsys.readouterr().out.splitlines() if ln.startswith("| ") and "%" in ln}
    assert list(rows) == ["float32", "bfloat16", "float16"]
    parts = rows["float32"][1:]
    assert len(parts) == 4 and all(c == "0.00% (1.0000)" for c in parts), rows["float32"]

    def error(cell):
        return float(cell.split("%")[0])
    for b16, f16 in zip(rows["bfloat16"][1:], rows["float16"][1:]):
        assert 0 < error(f16) < error(b16) < 100, rows
    # What it cannot use: one line each, exit status 2 (tracebacks before).
    ckpt = os.path.join(out, "checkpoints")
    settings_file = os.path.join(ckpt, "settings.json")
    with open(settings_file) as fh:
        record = json.load(fh)
    cut_ckpt = tmp_path / "cut_checkpoint"
    shutil.copytree(ckpt, cut_ckpt)
    (data,) = cut_ckpt.glob("ckpt-*.data-*")
    data.write_bytes(data.read_bytes()[:100])
    cut_records = tmp_path / "cut_records"
    cut_records.mkdir()
    (first, *_) = sorted(pathlib.Path(shapes_records).glob("train-*"))
    (cut_records / first.name).write_bytes(first.read_bytes()[:3000])

    def refused(extra, edit=None):
        with open(settings_file, "w") as fh:
            fh.write(edit if isinstance(edit, str) else json.dumps(edit or record))
        monkeypatch.setattr("sys.argv", [*argv, *extra])
        assert script.main() == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("precision_error.py: error: "), err
        return err[0].removeprefix("precision_error.py: error: ")
    assert refused(["--checkpoint", str(tmp_path / "none")]) == (
        f"--checkpoint {tmp_path / 'none'} is neither a checkpoint prefix (DIR/ckpt-N) nor a "
        "directory of checkpoints")
    assert refused([], "{cut").startswith(f"{settings_file} cannot be read (")
    assert refused([], {**record, "model": "resnet50v1.5"}) == (
        f"--checkpoint {ckpt} is a checkpoint of resnet50v1.5, not of ssd320")
    settings = {k: v for k, v in record["settings"].items() if k != "trunk"}
    assert refused([], {**record, "settings": settings}).startswith(
        f"--checkpoint {ckpt}: its settings.json lacks trunk")
    assert refused(["--checkpoint", str(cut_ckpt)]).startswith(f"--checkpoint {cut_ckpt}/ckpt-")
    assert refused(["--data_dir", str(cut_records)]).startswith(
        f"--data_dir {cut_records}: its train-* records cannot be read as SSD320's (")
    assert refused(["--data_dir", digits_records]).startswith(
        f"--data_dir {digits_records}: its train-* records cannot be read as SSD320's (")
