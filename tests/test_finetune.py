"""Fine-tuning (``--finetune_checkpoint``) and checkpoints that say what they are
(``settings.json``, common/checkpoint/settings.py), for every model through main.py's code path:
a fine-tuning run starts at step 0 from the checkpoint's weights and learns, a classifier for
another number of classes starts afresh with a line, another vocabulary is refused, resuming
wins over fine-tuning; evaluate, predict, export and resume take omitted settings from the
checkpoint and refuse a contradicting flag with one line naming it (exit 2)."""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import TINY, step_losses

from common import runner
from common.checkpoint import settings as checkpoint_settings
from common.runtime.dllogger import read_records
from rn50.task import ResNetTask
from ssd.task import SSDTask
from txl.prepare import vocab_hash
from txl.task import TransformerXLTask

RN_TINY = TINY  # its 10 classes give way to labels.txt's where there are data
SSD_TINY = [*TINY, "--image_size", "64", "--lr_warmup_steps", "1"]
TXL_TINY = [*TINY, "--seed", "3", "--lr_warmup_steps", "2", "--display_every", "1"]


# A flag against the checkpoint's settings.json is this repository's Python: in one suite.
SETTINGS_ONLY = pytest.mark.one_stack(
    "pip", "the check of a flag against settings.json is this repository's Python; fine-tuning "
    "itself runs on both stacks (the other cases)")


def _losses(results_dir):
    records = read_records(os.path.join(results_dir, "log.json"))
    return step_losses(records)


def _lines(capsys):
    return capsys.readouterr().out.splitlines()


def test_resnet_finetunes_another_class_count_from_step_0_and_learns(tmp_path, digits_records,
                                                                     capsys):
    # The source: 7 classes on synthetic data (another task's classifier).
    source = tmp_path / "source"
    runner.run(ResNetTask, ["main.py", *RN_TINY, "--num_classes", "7", "--mode", "train",
                            "--iter_unit", "batch", "--num_iter", "2", "--results_dir",
                            str(source), "--seed", "1"])
    capsys.readouterr()
    out = tmp_path / "ft"
    args = ["main.py", *RN_TINY, "--mode", "train", "--data_dir", digits_records,
            "--finetune_checkpoint", str(source / "checkpoints"), "--results_dir", str(out),
            "--iter_unit", "batch", "--seed", "2", "--lr_init", "0.5", "--batch_size", "16",
            "--crop_area_min", "0.5", "--label_smoothing", "0"]
    summary = runner.run(ResNetTask, [*args, "--num_iter", "40"])
    said = _lines(capsys)
    assert summary["start_step"] == 0 and summary["final_step"] == 40
    assert any(ln.startswith(f"fine-tuning from {source / 'checkpoints'}/ckpt-2: its weights, "
                             "step 0") for ln in said), said
    assert "logits starts afresh: its shape in the checkpoint differs (another number of " \
           "classes)" in said
    assert "from --finetune_checkpoint" in "\n".join(said)  # arch and padding taken from it
    losses = _losses(out)
    assert np.mean(losses[-8:]) < np.mean(losses[:8]) - 0.5, losses  # 2.3 -> 1.2 when tried
    found = checkpoint_settings.read(str(out / "checkpoints"))
    assert found["settings"] == {"arch": "resnet_tiny", "image_size": 32, "num_classes": 10,
                                 "padding": "same"}
    assert (out / "checkpoints" / "labels.txt").exists()
    # Resuming wins: a second run of the same command continues at step 40.
    capsys.readouterr()
    summary = runner.run(ResNetTask, [*args, "--num_iter", "42"])
    assert summary["start_step"] == 40 and summary["final_step"] == 42
    assert any("not read: resuming the run in" in ln for ln in _lines(capsys))


def test_the_finetuned_trunk_starts_from_the_checkpoints_weights(tmp_path, digits_records):
    source = tmp_path / "source"
    runner.run(ResNetTask, ["main.py", *RN_TINY, "--num_classes", "7", "--mode", "train",
                            "--iter_unit", "batch", "--num_iter", "1", "--results_dir",
                            str(source), "--seed", "1"])
    trainer = runner.setup(ResNetTask, ["main.py", *RN_TINY, "--mode", "train", "--data_dir",
                                        digits_records, "--finetune_checkpoint",
                                        str(source / "checkpoints"), "--results_dir",
                                        str(tmp_path / "ft"), "--seed", "5"])
    try:
        trainer.restore()
        original = runner.setup(ResNetTask, ["main.py", *RN_TINY, "--num_classes", "7",
                                             "--mode", "train", "--results_dir", str(source)])
        original.log.close()
        original.restore(required=True)
        for name in ("stem_conv", "stage3_block1_2_bn"):
            for a, b in zip(trainer.model.get_layer(name).weights,
                            original.model.get_layer(name).weights):
                np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert trainer.step == 0
        assert all(float(tf.reduce_sum(tf.abs(v))) == 0
                   for v in trainer.inner_optimizer.variables[1:])  # momenta: fresh
    finally:
        trainer.log.close()


# `make test-slow` (the suite's time budget): a new head over a checkpoint's trunk is ResNet-50's
# case.
@pytest.mark.slow
def test_ssd_finetunes_a_detector_for_more_classes(tmp_path, shapes_records, capsys):
    source = tmp_path / "source"
    runner.run(SSDTask, ["main.py", *SSD_TINY, "--mode", "train", "--data_dir", shapes_records,
                         "--iter_unit", "batch", "--num_iter", "2", "--results_dir",
                         str(source), "--seed", "1"])
    assert checkpoint_settings.read(str(source / "checkpoints"))["settings"]["trunk"] == \
        "resnet_v1"
    capsys.readouterr()
    out = tmp_path / "ft"
    summary = runner.run(SSDTask, ["main.py", *SSD_TINY, "--mode", "train", "--data_dir",
                                   shapes_records, "--num_classes", "9", "--iter_unit", "batch",
                                   "--num_iter", "2", "--finetune_checkpoint",
                                   str(source / "checkpoints"), "--results_dir", str(out)])
    said = _lines(capsys)
    assert summary["start_step"] == 0 and summary["final_step"] == 2
    assert "class_head starts afresh: its shape in the checkpoint differs (another number of " \
           "classes)" in said
    assert not any(ln.startswith("note: no --backbone_checkpoint") for ln in said)
    assert runner.main(SSDTask, ["main.py", *SSD_TINY, "--mode", "train", "--data_dir",
                                 shapes_records, "--finetune_checkpoint", str(source),
                                 "--backbone_checkpoint", str(source)]) == 2
    assert "--backbone_checkpoint and --finetune_checkpoint both give" in \
        capsys.readouterr().err


def test_transformerxl_finetunes_on_its_vocabulary_and_refuses_another(tmp_path, corpus, capsys):
    source = tmp_path / "source"
    fast = ["--lr", "0.02", "--lr_warmup_steps", "2", "--iter_unit", "batch", "--display_every",
            "1"]
    runner.run(TransformerXLTask, ["main.py", *TINY, "--seed", "3", *fast, "--mode",
                                   "train", "--data_dir", corpus, "--num_iter", "40",
                                   "--results_dir", str(source)])
    facts = checkpoint_settings.read(str(source / "checkpoints"))["settings"]
    assert facts["preset"] == "tiny" and len(facts["vocab_sha256"]) == 16
    out = tmp_path / "ft"
    summary = runner.run(TransformerXLTask, ["main.py", "--mode", "train", "--data_dir", corpus,
                                             "--seed", "4", *fast, "--num_iter", "40",
                                             "--finetune_checkpoint",
                                             str(source / "checkpoints"), "--results_dir",
                                             str(out)])
    assert summary["start_step"] == 0 and summary["final_step"] == 40  # tiny, from the record
    # It starts where the source ended (from scratch: ln of the vocabulary, 3.7), and learns on.
    source_losses, losses = _losses(source), _losses(out)
    assert np.mean(losses[:8]) < np.mean(source_losses[:8]) - 0.2, (source_losses, losses)
    assert np.mean(losses[-8:]) < np.mean(losses[:8]) - 0.1, losses
    # The same corpus with two words of its vocabulary swapped: refused, one line.
    other = tmp_path / "other"
    shutil.copytree(corpus, other)
    words = (other / "vocab.txt").read_text().splitlines()
    words[3], words[4] = words[4], words[3]
    (other / "vocab.txt").write_text("\n".join(words) + "\n")
    info = json.loads((other / "corpus-info.json").read_text())  # as if prepared so
    (other / "corpus-info.json").write_text(json.dumps({**info,
                                                        "vocab_sha256": vocab_hash(words)}))
    capsys.readouterr()
    assert runner.main(TransformerXLTask, [
        "main.py", "--mode", "train", "--data_dir", str(other), "--finetune_checkpoint",
        str(source / "checkpoints"), "--results_dir", str(tmp_path / "bad")]) == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith(f"main.py: error: vocab.txt in --data_dir {other} (vocab_sha256 ")
    assert f"is not what --finetune_checkpoint {source / 'checkpoints'}" in last


@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory, digits_records):
    """A ResNet run of one step: each case below starts from a copy of it."""
    out = tmp_path_factory.mktemp("one_step") / "run"
    runner.run(ResNetTask, ["main.py", *RN_TINY, "--mode", "train", "--data_dir", digits_records,
                            "--iter_unit", "batch", "--num_iter", "1", "--results_dir", str(out)])
    return out


@SETTINGS_ONLY
@pytest.mark.parametrize("mode", ["evaluate", "predict", "train"])
def test_a_flag_that_contradicts_the_checkpoint_is_one_line_and_omitted_ones_are_taken(
        tmp_path, digits_records, capsys, mode, one_step_run):
    out = tmp_path / "run"
    shutil.copytree(one_step_run, out)
    extra = {"predict": ["--to_predict", os.path.join(digits_records, "labels.txt")],
             "train": ["--iter_unit", "batch", "--num_iter", "2"]}.get(mode, [])
    capsys.readouterr()
    assert runner.main(ResNetTask, ["main.py", "--mode", mode, "--data_dir", digits_records,
                                    "--results_dir", str(out), "--arch", "resnet50",
                                    *extra]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"main.py: error: --arch resnet50 contradicts the checkpoint in --model_dir "
                   f"{out / 'checkpoints'}, written with --arch resnet_tiny: drop the flag (it "
                   "is taken from the checkpoint) or use another checkpoint"]
    if mode == "evaluate":  # without the flags: the checkpoint's, and an export of it
        summary = runner.run(ResNetTask, ["main.py", "--mode", mode, "--data_dir",
                                          digits_records, "--results_dir", str(out),
                                          "--export_dir", str(tmp_path / "export")])
        assert summary["eval_images"] == 12
        assert "--arch resnet_tiny" in capsys.readouterr().out
        assert os.path.exists(tmp_path / "export" / "saved_model.pb")


@SETTINGS_ONLY
# `make test-slow` (the suite's time budget): the check of a flag against settings.json is
# ResNet-50's case above.
@pytest.mark.slow
def test_ssd_and_transformerxl_checkpoints_refuse_a_contradicting_flag(tmp_path, shapes_records,
                                                                      corpus, capsys):
    ssd = tmp_path / "ssd"
    runner.run(SSDTask, ["main.py", *SSD_TINY, "--mode", "train", "--data_dir", shapes_records,
                         "--iter_unit", "batch", "--num_iter", "1", "--results_dir", str(ssd)])
    capsys.readouterr()
    assert runner.main(SSDTask, ["main.py", "--mode", "evaluate", "--data_dir", shapes_records,
                                 "--results_dir", str(ssd), "--trunk", "resnet_v1.5"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--trunk resnet_v1.5 contradicts the checkpoint in --model_dir "
        f"{ssd / 'checkpoints'}, written with --trunk resnet_v1: drop the flag (it is taken from "
        "the checkpoint) or use another checkpoint")
    txl = tmp_path / "txl"
    runner.run(TransformerXLTask, ["main.py", *TXL_TINY, "--mode", "train", "--data_dir", corpus,
                                   "--iter_unit", "batch", "--num_iter", "1", "--results_dir",
                                   str(txl)])
    capsys.readouterr()
    assert runner.main(TransformerXLTask, ["main.py", "--mode", "train", "--data_dir", corpus,
                                           "--results_dir", str(txl), "--n_layer", "3",
                                           "--iter_unit", "batch", "--num_iter", "2"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "--n_layer 3 contradicts the checkpoint in --model_dir "
        f"{txl / 'checkpoints'}, written with --n_layer 2: drop the flag (it is taken from the "
        "checkpoint) or use another checkpoint")
    # Resumed without any model flag: the checkpoint's preset and shape.
    summary = runner.run(TransformerXLTask, ["main.py", "--mode", "train", "--data_dir", corpus,
                                             "--results_dir", str(txl), "--iter_unit", "batch",
                                             "--num_iter", "2"])
    assert summary["start_step"] == 1 and summary["final_step"] == 2
