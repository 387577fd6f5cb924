"""ResNet-50 v1.5: exact size, dtypes, pipelines, and every mode end to end on real images."""
import json
import os
import re
import sys

import dle_logs
import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import RN50, TINY, dtype_policy, run_cli

from common import runner
from common.data import tfrecord_index
from rn50 import dali_pipeline, digits, eval_preprocessing, prepare, tfdata_pipeline
from rn50.model import build_resnet
from rn50.task import ResNetTask


def _count(variables):
    return int(sum(np.prod(v.shape) for v in variables))


def test_parameter_count_equals_reference_resnet50_v15():
    model = build_resnet("resnet50")
    assert _count(model.trainable_variables) == 25_557_032  # torchvision / NVIDIA RN50 v1.5
    assert _count(model.variables) == 25_610_152  # + batch-norm moving statistics
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == 53 and not any(c.use_bias for c in convs)
    # v1.5: a downsampling bottleneck strides its 3x3 convolution, not its first 1x1.
    assert model.get_layer("stage2_block1_2_conv").strides == (2, 2)
    assert model.get_layer("stage2_block1_1_conv").strides == (1, 1)
    bn = model.get_layer("stem_bn")
    assert (bn.epsilon, bn.momentum) == (1e-5, 0.9)


@pytest.mark.parametrize("policy, compute", [("float32", "float32"),
                                             ("mixed_float16", "float16"),
                                             ("mixed_bfloat16", "bfloat16")])
def test_shapes_and_dtypes_under_each_policy(policy, compute):
    with dtype_policy(policy):
        model = build_resnet("resnet_tiny", num_classes=10, image_size=64, zero_init_residual=True)
        logits = model(np.random.rand(2, 64, 64, 3).astype("float32"), training=False)
        assert logits.shape == (2, 10) and logits.dtype == tf.float32  # classifier in float32
        conv = model.get_layer("stage1_block1_2_conv")
        assert conv.compute_dtype == compute and conv.kernel.dtype == "float32"
        assert not np.any(model.get_layer("stage1_block1_3_bn").gamma.numpy())  # zero-init


def test_dali_and_tfdata_eval_preprocessing_agree(tmp_path):
    digits.export(str(tmp_path / "f"), size=64, limit=40)
    prepare.prepare(str(tmp_path / "f"), str(tmp_path / "r"), 1, 1, log=lambda *_: None)
    files = tfrecord_index.shard_files(str(tmp_path / "r"), "validation", "test")
    for size in (32, 56):  # a resize with an odd margin to crop, and a crop alone
        nvidia = eval_preprocessing.nvidia(size)
        a_img, a_lab = next(iter(tfdata_pipeline.dataset(files, 8, size, training=False,
                                                         prep=nvidia)))
        b_img, b_lab = next(iter(dali_pipeline.dataset(files, str(tmp_path / "r" / "idx"), 8,
                                                       size, training=False, prep=nvidia)))
        np.testing.assert_array_equal(a_lab.numpy(), b_lab.numpy())
        diff = np.abs(a_img.numpy() - b_img.numpy())
        # Two JPEG decoders and resize kernels: ~1 grey level on average, a few at worst.
        assert diff.mean() < 0.05 and np.percentile(diff, 99) < 0.3, (size, diff.mean())


def test_seeded_training_data_repeat_exactly_and_other_seeds_differ(digits_records):
    """One --seed, one stream: order, crops and flips (stateless ops keyed by each element)."""
    files = tfrecord_index.shard_files(digits_records, "train", "test")

    def first_batches(seed):
        ds = tfdata_pipeline.dataset(files, 8, 32, True, seed=seed, num_classes=10,
                                     prep=eval_preprocessing.nvidia(32))
        return [(x.numpy(), y.numpy()) for x, y in ds.take(4)]
    a, b, c = first_batches(5), first_batches(5), first_batches(6)
    for (xa, ya), (xb, yb) in zip(a, b):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert any(not np.array_equal(xa, xc) for (xa, _), (xc, _) in zip(a, c))


@pytest.mark.both_stacks
@pytest.mark.parametrize("dali", [False, True])
def test_every_mode_end_to_end(tmp_path, digits_records, dali):
    out = str(tmp_path)
    base = ["main.py", *TINY, "--data_dir", digits_records, "--results_dir", out]
    if dali:
        base.append("--dali")
    s = runner.run(ResNetTask, base + ["--mode", "train_and_evaluate", "--num_iter", "2"])
    assert s["final_step"] == 12 and s["epochs"] == 2  # 48 images / batch 8 = 6 steps an epoch
    assert s["eval_images"] == 12 and 0 <= s["top1_accuracy"] <= s["top5_accuracy"] <= 1
    tb = os.path.join(out, "tensorboard", "train_and_evaluate")
    tags = {v.tag for name in os.listdir(tb)
            for raw in tf.data.TFRecordDataset(os.path.join(tb, name))
            for v in tf.compat.v1.Event.FromString(raw.numpy()).summary.value}
    assert {"train/total_loss", "train/learning_rate", "eval/top1_accuracy",
            "eval/top5_accuracy"} <= tags
    assert not [t for t in tags if t.startswith("eval/eval_")]
    ev = runner.run(ResNetTask, base + ["--mode", "evaluate"])
    assert ev["top1_accuracy"] == pytest.approx(s["top1_accuracy"]) and ev["eval_images"] == 12
    for mode, rate in (("training_benchmark", "train_throughput"),
                       ("inference_benchmark", "eval_throughput")):
        b = runner.run(ResNetTask, base + ["--mode", mode, "--iter_unit", "batch",
                                           "--num_iter", "4", "--warmup_steps", "1"])
        assert b["timed_steps"] == 3 and b[rate] > 0
        if mode == "inference_benchmark":  # every step waited for: NVIDIA's latency figures
            assert b["eval_latency_p50"] <= b["eval_latency_p90"] <= b["eval_latency_p99"]
    # What a parser written for NVIDIA's logs finds in each of these runs (tests/dle_logs.py).
    assert dle_logs.check_log("resnet50v1.5", os.path.join(out, "log.json")) == [
        "train_and_evaluate", "evaluate", "training_benchmark", "inference_benchmark"]


def test_predict_returns_classes_for_image_files_and_exports(tmp_path, digits_records):
    out = str(tmp_path)
    base = ["main.py", *TINY, "--data_dir", digits_records, "--results_dir", out]
    runner.run(ResNetTask, base + ["--mode", "train", "--num_iter", "1"])
    images = tmp_path / "images"
    digits.export(str(images), size=40, limit=3, val_fraction=0)
    png = next((images / "train").rglob("*.JPEG"))
    keras.utils.save_img(str(tmp_path / "one.png"), keras.utils.load_img(str(png)))
    s = runner.run(ResNetTask, base + ["--mode", "predict", "--to_predict",
                                       str(images / "train" / "*" / "*.JPEG"),
                                       "--export_dir", str(tmp_path / "export")])
    assert s["predictions"] == 3
    # The summary ends with where the run's files are.
    assert list(s)[-4:] == ["log", "checkpoints", "predictions_file", "export"]
    assert (s["log"], s["checkpoints"], s["predictions_file"], s["export"]) == (
        str(tmp_path / "log.json"), str(tmp_path / "checkpoints"),
        str(tmp_path / "predictions.json"), str(tmp_path / "export"))
    preds = json.load(open(tmp_path / "predictions.json"))
    for p in preds:
        assert len(p["top5_classes"]) == 5 and all(0 <= c < 10 for c in p["top5_classes"])
        assert p["top5_names"][0] == f"digit_{p['top5_classes'][0]}"
        assert sum(p["top5_probs"]) <= 1.0001
    one = runner.run(ResNetTask, base + ["--mode", "predict", "--to_predict",
                                         str(tmp_path / "one.png")])
    assert one["predictions"] == 1
    served = tf.saved_model.load(str(tmp_path / "export")).signatures["preprocessed"]
    assert served(images=tf.zeros((2, 32, 32, 3)))["logits"].shape == (2, 10)
    # The labels the checkpoint was trained with travel in the export.
    assert (tmp_path / "export" / "assets" / "labels.txt").read_text().split()[0] == "digit_0"


def test_the_trial_export_and_the_export_share_one_trace_and_the_trained_weights(
        tmp_path, digits_records, monkeypatch):
    """--export_dir's room is measured by a trial export before training; the export after
    it saves the same traced signatures (made once), with the trained weights: its answers are
    the final checkpoint's, not the untrained network's of the trial."""
    from common import api
    from rn50.exports import ResNetExports
    made = []  # the weights each time the signatures are made
    signatures = ResNetExports.signatures
    monkeypatch.setattr(ResNetExports, "signatures", lambda self, model: made.append(
        model.get_weights()) or signatures(self, model))
    runner.run(ResNetTask, ["main.py", *TINY, "--data_dir", digits_records, "--results_dir",
                            str(tmp_path), "--mode", "train", "--num_iter", "3",
                            "--export_dir", str(tmp_path / "export")])
    assert len(made) == 1
    images = tf.random.stateless_uniform((2, 32, 32, 3), (1, 2), -2, 2)
    served = tf.saved_model.load(str(tmp_path / "export")).signatures["preprocessed"]
    trained = api.load(str(tmp_path / "checkpoints")).predict("preprocessed", images=images)
    np.testing.assert_allclose(served(images=images)["logits"], trained["logits"], atol=1e-5)
    at_the_trial = build_resnet("resnet_tiny", num_classes=10, image_size=32)
    at_the_trial.set_weights(made[0])
    assert np.abs(trained["logits"] - at_the_trial(images, training=False)).max() > 1e-3


def test_a_recipe_is_checked_at_the_runs_image_size(tmp_path, digits_records):
    """``resize:146`` leaves the crop out: at --image_size 128 it is a 128 crop of 146, which the
    flag's check (before the image size is known) took for a 224 crop and refused. A crop that
    does not fit is refused at the run's size, before any checkpoint is written."""
    from common.errors import UsageError
    base = ["main.py", *TINY, "--image_size", "128", "--data_dir", digits_records,
            "--mode", "train_and_evaluate", "--iter_unit", "batch", "--num_iter", "1"]
    s = runner.run(ResNetTask, [*base, "--eval_preprocessing", "resize:146",
                                "--results_dir", str(tmp_path / "ok")])
    assert s["final_step"] == 1 and "top1_accuracy" in s
    recorded = json.loads((tmp_path / "ok" / "checkpoints" / "settings.json").read_text())
    assert recorded["settings"]["eval_preprocessing"] == "resize:146"
    with pytest.raises(UsageError, match=r"^--eval_preprocessing resize:100 at --image_size 128: "
                       r"resize 100 and crop 128: the crop must fit the resize$"):
        runner.run(ResNetTask, [*base, "--eval_preprocessing", "resize:100", "--mode", "train",
                                "--results_dir", str(tmp_path / "refused")])
    assert not (tmp_path / "refused" / "checkpoints").exists()


def test_amp_environment_variable_through_main(tmp_path):
    proc = run_cli([sys.executable, os.path.join(RN50, "main.py"), *TINY, "--mode",
                    "training_benchmark", "--iter_unit", "batch", "--num_iter", "2",
                    "--warmup_steps", "1", "--results_dir", str(tmp_path)],
                   env={"TF_ENABLE_AUTO_MIXED_PRECISION": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert ("precision: policy mixed_bfloat16 (amp: env TF_ENABLE_AUTO_MIXED_PRECISION=1)"
            in proc.stdout)


@pytest.mark.one_stack("pip", "the sweep runs main.py as a user does; its table does not change "
                        "with the Python stack")
# `make test-slow` (the suite's time budget): benchmark.sh's sweep to one table is
# test_tool_commands'.
@pytest.mark.slow
def test_sweep_prints_a_table_with_speedups_against_fp32(tmp_path, capsys):
    """Two rounds, the configurations alternating; a line each: median, range, rounds, and the
    device the runs recorded (a CPU's batch is per process)."""
    from benchtools import sweep
    code = sweep.main([os.path.join(RN50, "main.py"), "--mode", "inference_benchmark",
                       "--batch_sizes", "4", "--precisions", "fp32,amp", "--rounds", "2",
                       "--results_dir", str(tmp_path), "--", "--arch", "resnet_tiny",
                       "--image_size", "32", "--iter_unit", "batch", "--num_iter", "3",
                       "--warmup_steps", "1"])
    out = capsys.readouterr().out
    assert code == 0, out
    rows = [ln for ln in out.splitlines() if ln.startswith("| fp32") or ln.startswith("| amp")]
    assert len(rows) == 2 and "| 1.00x |" in rows[0] and "x |" in rows[1]
    assert all(re.search(r"\| [\d.]+-[\d.]+ \| 2 \|", row) for row in rows)
    assert "| batch/process | processes |" in out and "Measured on " in out and "no GPU" in out
    saved = json.load(open(tmp_path / "sweep.json"))
    assert [r["precision"] for r in saved] == ["fp32", "amp", "fp32", "amp"]  # alternating
    assert saved[1]["eval_throughput"] > 0
    # Each step waited for: the latency's mean and tails, under NVIDIA's names, per row.
    assert "| eval_throughput (images/s, median) |" in out
    assert "| latency mean ms | p90 ms | p95 ms | p99 ms |" in out
    lat = [float(c) for c in rows[0].strip("|").split("|")[-4:]]
    assert lat[1] <= lat[2] <= lat[3] and all(v > 0 for v in lat)
    assert sorted(os.listdir(tmp_path)) == ["amp_bs4_gpu1_r1", "amp_bs4_gpu1_r2",
                                            "fp32_bs4_gpu1_r1", "fp32_bs4_gpu1_r2", "sweep.json"]


def test_dali_builds_missing_index_files_or_stops_with_one_line(tmp_path, digits_records):
    import shutil
    data = tmp_path / "data"
    shutil.copytree(digits_records, data)
    shutil.rmtree(data / "idx")
    s = runner.run(ResNetTask, ["main.py", *TINY, "--data_dir", str(data), "--dali", "--mode",
                                "train", "--iter_unit", "batch", "--num_iter", "1",
                                "--results_dir", str(tmp_path / "r")])
    assert s["final_step"] == 1
    # train mode reads (and indexes) the training files only
    assert sorted(f for f in os.listdir(data / "idx") if f.endswith(".idx")) == sorted(
        f + ".idx" for f in os.listdir(data) if f.startswith("train-"))
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("")  # index files cannot go below a regular file
    proc = run_cli([sys.executable, os.path.join(RN50, "main.py"), *TINY, "--data_dir",
                    digits_records, "--data_idx_dir", str(blocker / "idx"), "--dali", "--mode",
                    "train", "--results_dir", str(tmp_path / "r2")])
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("main.py: error: --dali needs index files in ")
    assert "--data_idx_dir" in last
