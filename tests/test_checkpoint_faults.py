"""Checkpoints are never lost or silently ignored (issue: hardening the shared runtime, part 1).

Each test goes through ``main.py`` (``runner.main``, or a real subprocess where the order of
stderr lines matters) and checks the exit code, the one line, and checksums of the checkpoints.
"""
import os
import shutil
import sys

import pytest
from conftest import OWN_HANDLING, RN50, TINY, run_cli, stderr_last_line
from reliability_helpers import ckpt_digests, tmpfs

from common import runner
from rn50.task import ResNetTask

MAIN = os.path.join(RN50, "main.py")


# What this repository's Python reads and writes itself, the same on both stacks: in one suite.
OWN_FILES_ONLY = pytest.mark.one_stack(
    "pip", "settings.json and the save's staging are this repository's Python and the file "
    "system's; TensorFlow's checkpoint reading is tested on both stacks (the other cases)")


def _args(tmp_path, *extra):
    return ["main.py", "--mode", "train", *TINY, "--iter_unit", "batch",
            "--results_dir", str(tmp_path / "r"), "--save_checkpoint_steps", "1", *extra]


def _train(tmp_path, steps, *extra):
    return runner.run(ResNetTask, _args(tmp_path, "--num_iter", str(steps), *extra))


def _main(tmp_path, capsys, steps, *extra):
    code = runner.main(ResNetTask, _args(tmp_path, "--num_iter", str(steps), *extra))
    out, err = capsys.readouterr()
    return code, out, [ln for ln in err.splitlines() if ln.strip()]


@OWN_HANDLING
@pytest.mark.parametrize("state", ["missing", "garbage"])
def test_lost_state_file_resumes_from_the_newest_checkpoint_on_disk(tmp_path, capsys, state):
    _train(tmp_path, 2)
    ckdir = tmp_path / "r" / "checkpoints"
    before = ckpt_digests(ckdir)
    if state == "missing":
        os.remove(ckdir / "checkpoint")
    else:
        (ckdir / "checkpoint").write_text("\x00garbage{{")
    code, out, _ = _main(tmp_path, capsys, 4)
    assert code == 0
    assert "'checkpoint' state file" in out and "restored" in out and "at step 2" in out
    after = ckpt_digests(ckdir)
    assert {k: after[k] for k in before} == before  # ckpt-1 and ckpt-2 untouched
    assert "ckpt-4.index" in after


@pytest.mark.both_stacks
def test_corrupt_newest_checkpoint_falls_back_and_is_kept_aside(tmp_path, capsys):
    _train(tmp_path, 3)
    ckdir = tmp_path / "r" / "checkpoints"
    data = ckdir / "ckpt-3.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    before = ckpt_digests(ckdir)
    code, out, _ = _main(tmp_path, capsys, 5)
    assert code == 0
    assert "skipped ckpt-3: it cannot be read" in out and "restored" in out and "at step 2" in out
    after = ckpt_digests(ckdir)
    # The corrupt files are kept, byte for byte, where no save can overwrite them.
    assert after["corrupt/ckpt-3.data-00000-of-00001"] == before["ckpt-3.data-00000-of-00001"]
    assert after["corrupt/ckpt-3.index"] == before["ckpt-3.index"]
    assert after["ckpt-2.index"] == before["ckpt-2.index"]
    assert {"ckpt-3.index", "ckpt-4.index", "ckpt-5.index"} <= set(after)  # new, clean ckpt-3


@OWN_HANDLING
def test_the_api_warns_when_it_loads_an_older_checkpoint_than_the_newest(tmp_path):
    """api.load of a directory whose newest checkpoint is damaged restores the one before, as
    --mode evaluate does, and says so as a Python warning the caller sees (it was a line in
    ``model.messages`` alone); a prefix loads its own step, or says why it cannot."""
    from common import api
    _train(tmp_path, 2)
    ckdir = tmp_path / "r" / "checkpoints"
    data = ckdir / "ckpt-2.data-00000-of-00001"
    with open(data, "r+b") as f:
        f.truncate(os.path.getsize(data) // 2)
    with pytest.warns(UserWarning, match=f"^{ckdir}: skipped ckpt-2: it cannot be read"):
        model = api.load(str(ckdir))
    assert model._trainer.step == 1
    # A prefix loads that step, as documented (it was refused: "no checkpoint in --model_dir").
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert api.load(str(ckdir / "ckpt-1"))._trainer.step == 1
    from common.errors import DataError
    with pytest.raises(DataError, match=f"^checkpoint {ckdir / 'ckpt-2'} cannot be read "):
        api.load(str(ckdir / "ckpt-2"))


def test_no_readable_checkpoint_stops_and_touches_nothing(tmp_path, capsys):
    _train(tmp_path, 1)
    ckdir = tmp_path / "r" / "checkpoints"
    (ckdir / "ckpt-1.data-00000-of-00001").write_bytes(b"\x00" * 10)
    before = ckpt_digests(ckdir)
    code, _, err = _main(tmp_path, capsys, 3)
    assert code == 1
    assert err[-1].startswith("main.py: error: none of the 1 checkpoint(s) in ")
    assert "move them away to start from scratch" in err[-1]
    assert ckpt_digests(ckdir) == before


def test_checkpoint_of_another_model_stops_with_the_last_line_on_stderr(tmp_path):
    _train(tmp_path, 1)
    ckdir = tmp_path / "r" / "checkpoints"
    argv = _args(tmp_path, "--num_iter", "3", "--num_classes", "7")
    # The checkpoint's settings.json names the flag that contradicts it, before any model.
    proc = run_cli([sys.executable, MAIN, *argv[1:]])
    assert proc.returncode == 2
    assert stderr_last_line(proc) == (
        f"main.py: error: --num_classes 7 contradicts the checkpoint in --model_dir {ckdir}, "
        "written with --num_classes 10: drop the flag (it is taken from the checkpoint) or use "
        "another checkpoint")
    # A checkpoint written before settings.json existed: the restore finds the mismatch.
    os.remove(ckdir / "settings.json")
    before = ckpt_digests(ckdir)
    proc = run_cli([sys.executable, MAIN, *argv[1:]])
    assert proc.returncode == 1
    last = stderr_last_line(proc)
    assert last.startswith("main.py: error: checkpoint ") and "does not fit this model" in last
    assert "Traceback" not in proc.stderr
    assert ckpt_digests(ckdir) == before  # never overwritten by a from-scratch run


@pytest.mark.parametrize("setting, value, why", [
    ("arch", "resnet999", "value should be one of <resnet50|resnet_tiny>"),
    ("image_size", -5, "-5 is not an integer in the range [32, 2048]"),
    # An evaluation recipe that does not parse, or of non-finite numbers: adopted on resume, it
    # ended in a 60-line autograph traceback after the restore.
    ("eval_preprocessing", "resize:abc", "--eval_preprocessing resize:abc: a number is wrong "
     "(invalid literal for int() with base 10: 'abc')"),
    ("eval_preprocessing", "mean:nan/1/1", "--eval_preprocessing mean:nan/1/1: mean nan/1/1 "
     "and std 58.395/57.12/57.375: finite numbers within +-1e+06, the std at least 1e-06 (on "
     "the 0..255 scale; anything else makes every input NaN or the same)")])
@OWN_FILES_ONLY
def test_an_edited_settings_record_is_refused_as_the_flag_would_be(tmp_path, capsys, setting,
                                                                  value, why):
    """settings.json's values were adopted unchecked: an "arch" no model has was a KeyError at
    the resume, a negative image size a shape error. They are held to the flags' own checks."""
    import json
    _train(tmp_path, 1)
    ckdir = tmp_path / "r" / "checkpoints"
    record = json.loads((ckdir / "settings.json").read_text())
    record["settings"][setting] = value
    (ckdir / "settings.json").write_text(json.dumps(record))
    before = ckpt_digests(ckdir)
    code, _, err = _main(tmp_path, capsys, 2)
    assert code == 1 and err[-1] == (
        f"main.py: error: the checkpoint in --model_dir {ckdir}'s settings.json records "
        f"{setting} {value}, which --{setting} does not take ({why}): the record was edited or "
        "damaged; restore it from a copy, or delete it to read the checkpoint without it")
    assert ckpt_digests(ckdir) == before


@OWN_HANDLING
@pytest.mark.parametrize("fault", ["results_dir_is_a_file", "tensorboard_is_a_file",
                                   "model_dir_is_a_file", "model_dir_read_only",
                                   "model_dir_full"])
def test_unusable_output_directories_stop_before_training(tmp_path, capsys, fault):
    extra = []
    blocker = tmp_path / "file"
    blocker.write_text("")
    mount = None
    if fault in ("results_dir_is_a_file", "tensorboard_is_a_file"):
        argv = _args(tmp_path, "--num_iter", "2")
        results = blocker
        if fault == "tensorboard_is_a_file":  # where the TensorBoard events go
            results = tmp_path / "results"
            results.mkdir()
            blocker = results / "tensorboard"
            blocker.write_text("")
        argv[argv.index("--results_dir") + 1] = str(results)
        code = runner.main(ResNetTask, argv)
        out, err = capsys.readouterr()
        expected = (f"--results_dir {blocker} is a file, not a directory"
                    if fault == "results_dir_is_a_file" else
                    f"--results_dir's TensorBoard directory {blocker / 'train'} cannot be made: "
                    f"{blocker} is a file, not a directory")
        assert code == 1 and err.strip().splitlines()[-1] == "main.py: error: " + expected
        assert "Traceback" not in err
        return
    if fault == "model_dir_is_a_file":
        extra = ["--model_dir", str(blocker)]
        expected = f"--model_dir {blocker} is a file, not a directory"
    elif fault == "model_dir_read_only":
        mount = tmpfs(tmp_path / "ro", 1024, read_only=True)
        extra = ["--model_dir", str(tmp_path / "ro")]
        expected = f"--model_dir {tmp_path / 'ro'} is not writable (Read-only file system)"
    else:
        mount = tmpfs(tmp_path / "full", 256)  # a tiny ResNet checkpoint needs about 2 MiB
        extra = ["--model_dir", str(tmp_path / "full")]
        expected = f"--model_dir {tmp_path / 'full'} has 0.2 MiB free; a checkpoint needs about"
    if mount is not None:
        mount.__enter__()
    try:
        code, out, err = _main(tmp_path, capsys, 2, *extra)
    finally:
        if mount is not None:
            mount.__exit__(None, None, None)
    assert code == 1
    assert err[-1].startswith(f"main.py: error: {expected}")
    assert "step 1/" not in out  # found before the first step, not at the first save


@OWN_HANDLING
def test_disk_full_during_a_save_keeps_earlier_checkpoints_and_no_temp(tmp_path, capsys):
    ckdir = tmp_path / "full"
    with tmpfs(ckdir, 2600):  # room for two ~1 MiB checkpoints, not three
        code, out, err = _main(tmp_path, capsys, 6, "--model_dir", str(ckdir))
        assert code == 1
        assert err[-1].startswith(f"main.py: error: cannot save checkpoint {ckdir}/ckpt-3 (")
        assert "No space left on device" in err[-1]
        assert err[-1].endswith(f"earlier checkpoints are kept (latest: {ckdir}/ckpt-2)")
        names = sorted(os.listdir(ckdir))
        assert not [n for n in names if "_temp" in n or n.startswith("ckpt-3")]
        saved = ckpt_digests(ckdir)
        assert {"ckpt-1.index", "ckpt-2.index"} <= set(saved)
        shutil.copytree(ckdir, tmp_path / "copy")
    # What was kept restores: the next run (on a disk with room) resumes from ckpt-2.
    code, out, _ = _main(tmp_path, capsys, 3, "--model_dir", str(tmp_path / "copy"))
    assert code == 0 and "at step 2" in out


@OWN_FILES_ONLY
def test_leftover_temp_directory_of_a_killed_save_is_removed(tmp_path, capsys):
    _train(tmp_path, 1)
    ckdir = tmp_path / "r" / "checkpoints"
    (ckdir / "ckpt-2_temp").mkdir()
    (ckdir / "ckpt-2_temp" / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 100)
    code, out, _ = _main(tmp_path, capsys, 2)
    assert code == 0 and "removed ckpt-2_temp, left behind by an interrupted save" in out
    assert not (ckdir / "ckpt-2_temp").exists() and (ckdir / "ckpt-2.index").exists()


@pytest.mark.both_stacks
def test_resume_in_another_precision_and_back(tmp_path, capsys):
    runs = [([], 1), (["--amp", "--amp_dtype", "float16"], 2), (["--amp"], 3), ([], 4),
            (["--amp", "--amp_dtype", "float16", "--static_loss_scale", "128"], 5),
            (["--amp", "--amp_dtype", "float16"], 6)]
    for extra, steps in runs:
        code, out, err = _main(tmp_path, capsys, steps, *extra)
        assert code == 0, err[-1:]
        if steps > 1:
            assert f"at step {steps - 1}" in out
    # float16 after bfloat16 starts its loss scale afresh; float16 after float16 keeps it.
    assert "holds no float16 loss scale" not in out
