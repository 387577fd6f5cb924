"""The shared runtime through ResNet's main.py: logs, resume, graceful stop, one-line errors."""
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import OWN_HANDLING, RN50, TINY, run_cli, stderr_last_line
from linear_task import LinearTask

from common import main_py, runner
from common.errors import UsageError
from common.runtime import dllogger
from rn50.task import ResNetTask

MAIN = os.path.join(RN50, "main.py")


@OWN_HANDLING
def test_dllogger_records_parse_back(tmp_path):
    out = str(tmp_path)
    summary = runner.run(ResNetTask, ["main.py", "--mode", "train", *TINY, "--iter_unit", "batch",
                                      "--num_iter", "3", "--results_dir", out])
    records = dllogger.read_records(os.path.join(out, "log.json"))
    meta = {r["metric"]: r["metadata"] for r in records if r["type"] == "METADATA"}
    assert meta["imgs_per_sec"]["unit"] == meta["train_throughput"]["unit"] == "images/s"
    assert meta["eval_latency_p90"]["unit"] == "ms" and meta["top1_accuracy"]["unit"] is None
    params = [r for r in records if r.get("step") == "PARAMETER"]
    assert len(params) == 1
    assert params[0]["data"]["batch_size"] == 8 and params[0]["data"]["arch"] == "resnet_tiny"
    assert params[0]["data"]["dtype_policy"] == "float32" and "use_tf_amp" not in params[0]["data"]
    steps = [r for r in records if r["type"] == "LOG" and isinstance(r["step"], list) and r["step"]]
    assert [r["step"] for r in steps] == [[1, 1], [1, 2], [1, 3]]
    assert all({"total_loss", "learning_rate", "imgs_per_sec"} <= set(r["data"]) for r in steps)
    final = [r for r in records if r.get("step") == []]
    assert len(final) == 1 and final[0]["data"]["final_step"] == 3
    assert final[0]["data"]["final_loss"] == pytest.approx(summary["final_loss"])
    events = os.listdir(os.path.join(out, "tensorboard", "train"))
    assert any(e.startswith("events.out.tfevents") for e in events)


def test_resume_continues_at_the_exact_step(tmp_path):
    args = ["main.py", "--mode", "train", *TINY, "--iter_unit", "batch",
            "--results_dir", str(tmp_path)]
    assert runner.run(ResNetTask, args + ["--num_iter", "4"])["final_step"] == 4
    resumed = runner.run(ResNetTask, args + ["--num_iter", "7"])
    assert (resumed["start_step"], resumed["final_step"]) == (4, 7)
    records = dllogger.read_records(os.path.join(tmp_path, "log.json"))
    steps = [r["step"][1] for r in records if r["type"] == "LOG" and isinstance(r["step"], list)
             and len(r["step"]) == 2 and "total_loss" in r["data"]]
    assert steps == [1, 2, 3, 4, 5, 6, 7]
    ckpts = sorted(f for f in os.listdir(tmp_path / "checkpoints") if f.endswith(".index"))
    assert ckpts == ["ckpt-4.index", "ckpt-7.index"]
    nothing = runner.run(ResNetTask, args + ["--num_iter", "7"])
    assert nothing["final_step"] == 7 and "final_loss" not in nothing


def test_sigterm_checkpoints_exits_zero_and_resumes(tmp_path):
    out = str(tmp_path)
    args = [MAIN, "--mode", "train", *TINY, "--iter_unit", "batch", "--results_dir", out]
    cmd = [sys.executable, *args, "--num_iter", "100000"]
    log = open(tmp_path / "stdout", "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.time() + 120
    while time.time() < deadline and "step 5/" not in (tmp_path / "stdout").read_text():
        time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    text = (tmp_path / "stdout").read_text()
    stopped = int(text.split("SIGTERM: stopped at step ")[1].split(",")[0])
    assert os.path.exists(tmp_path / "checkpoints" / f"ckpt-{stopped}.index")
    resumed = runner.run(ResNetTask, args + ["--num_iter", str(stopped + 2)])
    assert (resumed["start_step"], resumed["final_step"]) == (stopped, stopped + 2)


def test_nan_loss_stops_with_one_line_and_keeps_the_checkpoint(tmp_path, monkeypatch, capsys):
    import tensorflow as tf

    real = LinearTask.train_loss

    def loss_turning_nan(self, model, batch, state=None):
        loss, state = real(self, model, batch, state)
        return loss * tf.constant(float("nan")), state

    args = ["x", "--results_dir", str(tmp_path), "--save_checkpoint_steps", "2"]
    runner.run(LinearTask, args + ["--num_iter", "2"])
    monkeypatch.setattr(LinearTask, "train_loss", loss_turning_nan)
    code = runner.main(LinearTask, args + ["--num_iter", "5"])
    assert code == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert re.fullmatch(r"x: error: loss is nan at step 5: the gradients were not finite for 3 "
                        r"consecutive steps since step 3 \(first: sequential\w*/dense\w*/kernel\), "
                        r"and none of them was applied; stopped without saving \(last checkpoint: "
                        r".*ckpt-4\)", err), err
    ckpts = tmp_path / "checkpoints"
    assert sorted(f for f in os.listdir(ckpts) if f.endswith(".index")) == \
        ["ckpt-2.index", "ckpt-4.index"]
    # Steps 3 and 4 were skipped, not applied: ckpt-4 holds step 2's weights.
    two, four = (tf.train.load_checkpoint(str(ckpts / f"ckpt-{n}")) for n in (2, 4))
    for name in two.get_variable_to_shape_map():
        if name.startswith("model/"):
            np.testing.assert_array_equal(two.get_tensor(name), four.get_tensor(name))


@OWN_HANDLING
def test_an_error_line_is_one_write_that_other_ranks_cannot_split(tmp_path, monkeypatch):
    """mpirun merges the ranks' stderr; each of their lines must reach it in one write (print
    wrote the newline apart, and one rank's error ran into the next rank's line)."""
    writes = []

    class Recorder:
        def write(self, text):
            writes.append(text)

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stderr", Recorder())
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "1")
    args = ["x", "--results_dir", str(tmp_path), "--data_dir", str(tmp_path / "none")]
    assert runner.main(LinearTask, args) == 1
    assert writes and all(w.endswith("\n") and w.count("\n") == 1 for w in writes), writes
    assert writes[-1].startswith("x: error (rank 1): --data_dir "), writes


@OWN_HANDLING
@pytest.mark.parametrize("extra, code, message", [
    (["--bogus_flag", "1"], 2, "Unknown command line flag 'bogus_flag'"),
    (["--data_dir", "/no/such/dir"], 1, "--data_dir /no/such/dir does not exist"),
    (["--mode", "evaluate"], 2, "--mode evaluate needs --data_dir"),
    (["--dali"], 2, "--dali needs --data_dir"),
    (["--mode", "training_benchmark", "--num_iter", "5"], 2, "use --iter_unit batch"),
    (["--seed", "-1"], 2, "flag --seed=-1: -1 is not an integer in the range [0, 4294967295]"),
    (["--log_filename", "tensorboard"], 2, "--log_filename tensorboard must name a file inside "
                                           "--results_dir, not a directory or a path"),
    (["--log_filename", "."], 2, "--log_filename . must name a file inside --results_dir, not "
                                 "a directory or a path"),
    (["--export_dir", "/tmp/e", "--export_triton", "/tmp/e/triton"], 2,
     "--export_triton /tmp/e/triton is inside --export_dir /tmp/e: give the model repository a "
     "directory beside the export"),
    (["--export_dir", "/tmp/t/e", "--export_triton", "/tmp/t"], 2,
     "--export_dir /tmp/t/e is inside --export_triton /tmp/t: Triton reads every folder there "
     "as a model; give the export a directory beside the repository"),
    # An export into the checkpoints' directory became what api.load found there.
    (["--export_dir", "/tmp/r/ck", "--model_dir", "/tmp/r/ck"], 2, "--export_dir /tmp/r/ck and "
     "the checkpoints' --model_dir /tmp/r/ck need directories of their own, neither inside the "
     "other"),
    (["--results_dir", "/tmp/r", "--export_dir", "/tmp/r"], 2, "--export_dir /tmp/r and the "
     "checkpoints' --model_dir /tmp/r/checkpoints need directories of their own"),
    # A recipe of non-finite or overflowing numbers: every image NaN, or all the same.
    (["--eval_preprocessing", "mean:nan/1/1"], 2, "mean nan/1/1 and std 58.395/57.12/57.375: "
     "finite numbers within +-1e+06, the std at least 1e-06"),
    (["--eval_preprocessing", "mean:1e39/0/0"], 2, "mean 1e+39/0/0 and std"),
    (["--eval_preprocessing", "std:inf/1/1"], 2, "and std inf/1/1: finite numbers"),
])
def test_bad_command_lines_fail_with_one_line(extra, code, message):
    proc = run_cli([sys.executable, MAIN, *extra])
    assert proc.returncode == code
    last = stderr_last_line(proc)
    assert last == f"main.py: error: {message}" or message in last
    assert "Traceback" not in proc.stderr


def test_corrupt_tfrecord_fails_with_one_line(tmp_path, digits_records):
    import shutil
    data = tmp_path / "data"
    shutil.copytree(digits_records, data)
    victim = sorted(p for p in os.listdir(data) if p.startswith("train-"))[0]
    with open(data / victim, "r+b") as f:
        f.truncate(os.path.getsize(data / victim) - 100)
    os.remove(data / "idx" / f"{victim}.idx")  # indexes are rebuilt by scanning: it fails there
    proc = run_cli([sys.executable, MAIN, "--mode", "train", *TINY, "--data_dir", str(data),
                    "--results_dir", str(tmp_path / "r")])
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert stderr_last_line(proc).startswith("main.py: error: ")
    assert f"{victim} is truncated or not a TFRecord file" in stderr_last_line(proc)
    assert "Traceback" not in proc.stderr


def test_corrupt_image_inside_a_valid_record_fails_with_one_line(tmp_path):
    import tensorflow as tf

    from rn50 import prepare
    data = tmp_path / "data"
    data.mkdir()
    (data / "labels.txt").write_text("".join(f"c{i}\n" for i in range(10)))
    for split in ("train", "validation"):
        with tf.io.TFRecordWriter(str(data / f"{split}-00000-of-00001")) as w:
            for i in range(4):
                w.write(prepare._example(b"\xff\xd8\xff not really a jpeg", 1 + i, "c"))
    proc = run_cli([sys.executable, MAIN, "--mode", "train", *TINY, "--data_dir", str(data),
                    "--results_dir", str(tmp_path / "r"), "--batch_size", "2"])
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert stderr_last_line(proc).startswith("main.py: error: cannot read the input data:")
    assert "Traceback" not in proc.stderr


@OWN_HANDLING
def test_benchmark_rounds_alternate_and_keep_the_highest_ceiling():
    from common.tools.rounds import alternating_rounds, mfu_rows

    calls, ceilings_seen = [], iter([100.0, 10.0, 80.0, 40.0])  # fp32, amp per round
    rates, ceilings = alternating_rounds(
        2, ("training_benchmark",), {"fp32": "f", "amp": "b"},
        lambda mode, p: calls.append(p) or {"fp32": 5.0, "amp": 10.0}[p] + len(calls),
        lambda dtype: next(ceilings_seen))
    assert calls == ["fp32", "amp", "fp32", "amp"]  # precisions interleaved in every round
    assert ceilings == {"fp32": 100.0, "amp": 40.0}  # a slow measurement never lowers it
    assert rates[("training_benchmark", "amp")] == [12.0, 14.0]
    rows = mfu_rows(rates, {"training_benchmark": 2.0}, ceilings, digits=1)
    # amp: median 13 items/s x 2 FLOPs over 40 FLOP/s = 65%; fp32 median 7 -> 1.86x faster
    assert rows[1] == "| training | amp | 13.0 | 12.0, 14.0 | 65% | 1.86x |"


@OWN_HANDLING
def test_run_main_py_returns_the_log_and_raises_on_failure(tmp_path):
    records = main_py.run_main_py(MAIN, ["--mode", "train", *TINY, "--iter_unit", "batch",
                                        "--num_iter", "2"], str(tmp_path / "ok"))
    assert dllogger.last_summary(records)["final_step"] == 2
    with pytest.raises(subprocess.CalledProcessError):
        main_py.run_main_py(MAIN, ["--mode", "no_such_mode"], str(tmp_path / "bad"))


@OWN_HANDLING
def test_run_main_py_refuses_a_run_stopped_by_a_signal(tmp_path):
    """A run stopped by SIGTERM exits 0 with a checkpoint; its summary has no throughput, and a
    learning check's table failed on that with a KeyError instead of saying what happened."""
    fake = tmp_path / "main.py"
    fake.write_text(
        "import json, os, sys\n"
        "d = sys.argv[sys.argv.index('--results_dir') + 1]\n"
        "rec = {'type': 'LOG', 'step': [], 'data': {'final_step': 4, 'stopped_by_signal': True}}\n"
        "open(os.path.join(d, 'log.json'), 'w').write('DLLL ' + json.dumps(rec) + '\\n')\n")
    out = tmp_path / "run"
    out.mkdir()
    with pytest.raises(UsageError, match="stopped by a signal at step 4"):
        main_py.run_main_py(str(fake), [], str(out))


@OWN_HANDLING
def test_the_parameter_record_holds_what_the_run_derived(tmp_path):
    runner.run(ResNetTask, ["main.py", "--mode", "train", *TINY, "--iter_unit", "batch",
                            "--num_iter", "2", "--batch_chunk", "2", "--lr_init", "0.512",
                            "--results_dir", str(tmp_path)])
    records = dllogger.read_records(os.path.join(tmp_path, "log.json"))
    (params,) = [r["data"] for r in records if r.get("step") == "PARAMETER"]
    assert params["global_batch_size"] == 16  # 8 per process x 2 micro-batches x 1 process
    assert params["lr_peak"] == pytest.approx(0.512 * 16 / 256)  # the linear scaling rule
    assert params["total_steps"] == 2 and params["steps_per_epoch"] >= 1


@OWN_HANDLING
def test_ctrl_c_during_start_up_is_one_line(tmp_path):
    """SIGINT while TensorFlow imports or the model is built: no KeyboardInterrupt traceback."""
    # As from a terminal: a test run started in the background inherits SIGINT ignored.
    proc = subprocess.Popen([sys.executable, MAIN, "--mode", "train", *TINY, "--results_dir",
                             str(tmp_path), "--iter_unit", "batch", "--num_iter", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)  # generous: a loaded machine imports slowly
    assert proc.returncode in (130, -signal.SIGINT), err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "main.py: interrupted"


@OWN_HANDLING
def test_ctrl_c_where_python_ignores_exceptions_still_ends_the_run():
    """A KeyboardInterrupt raised inside a __del__ (as one landing in a weakref callback while
    TensorFlow imports) is not lost: one line, the process ends by SIGINT."""
    code = ("from common import versions\nversions.quiet_interrupts('main.py')\n"
            "class Late:\n    def __del__(self):\n        raise KeyboardInterrupt\n"
            "Late()\nprint('went on')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == -signal.SIGINT, proc.stderr
    assert "went on" not in proc.stdout
    assert proc.stderr.strip().splitlines() == ["main.py: interrupted"]


@OWN_HANDLING
def test_help_lists_every_flag_and_exits_zero():
    proc = run_cli([sys.executable, MAIN, "--help"])
    assert proc.returncode == 0 and proc.stdout.startswith("usage: main.py")
    assert "--batch_size" in proc.stdout and "--arch" in proc.stdout  # common and ResNet's own


@OWN_HANDLING
def test_a_flagfile_that_is_not_text_is_one_line(tmp_path):
    """--flagfile naming a binary file was a UnicodeDecodeError traceback (a missing one was
    already one line)."""
    binary = tmp_path / "flags.bin"
    binary.write_bytes(bytes(range(256)) * 4)
    for args in (["--flagfile", str(binary)], [f"--flagfile={binary}"]):
        proc = run_cli([sys.executable, MAIN, *args])
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert stderr_last_line(proc) == (f"main.py: error: --flagfile {binary}: not a text "
                                          "file (one --flag=value a line)")
